// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"bytes"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func rs(a string, port uint16, active, inactive int) RealServer {
	return RealServer{Address: netip.MustParseAddr(a), Port: port, Weight: 1, Forward: Masquerade, ActiveConn: active, InactiveConn: inactive}
}

func vs(a string, port uint16, sched string) VirtualServer {
	return VirtualServer{Address: netip.MustParseAddr(a), Protocol: TCP, Port: port, Scheduler: sched, Flags: FlagHashed, Netmask: 0xffffffff}
}

// TestWriteIPVSAdmMatchesRealCapture renders the table kube-proxy 1.37.1
// programmed in a real kernel and compares it with what ipvsadm printed.
func TestWriteIPVSAdmMatchesRealCapture(t *testing.T) {
	want, err := os.ReadFile("testdata/ipvsadm-Ln-lc.txt")
	if err != nil {
		t.Fatal(err)
	}
	tbl := Table{
		{Virtual: vs("192.0.2.10", 80, "lc"), Real: []RealServer{rs("10.0.2.15", 8080, 0, 0), rs("10.244.1.11", 8080, 0, 1)}},
		{Virtual: vs("10.0.2.15", 30080, "lc"), Real: []RealServer{rs("10.0.2.15", 8080, 0, 0), rs("10.244.1.11", 8080, 0, 1)}},
		{Virtual: vs("10.96.0.1", 443, "lc")},
		{Virtual: vs("10.96.0.50", 80, "lc"), Real: []RealServer{rs("10.0.2.15", 8080, 0, 1)}},
		{Virtual: vs("10.96.0.60", 80, "lc"), Real: []RealServer{rs("10.0.2.15", 8080, 0, 0), rs("10.244.1.11", 8080, 0, 1)}},
	}
	var got bytes.Buffer
	if err := tbl.WriteIPVSAdm(&got); err != nil {
		t.Fatal(err)
	}
	_, wantBody, _ := strings.Cut(string(want), "\n")
	if diff := cmp.Diff(wantBody, got.String()); diff != "" {
		t.Errorf("(-ipvsadm +ours)\n%s", diff)
	}
}

func TestIPVSAdmServiceLine(t *testing.T) {
	tests := []struct {
		name string
		v    VirtualServer
		want string
	}{
		{"udp", VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: UDP, Port: 53, Scheduler: "rr"}, "UDP  10.96.0.10:53 rr"},
		{"sctp ipv6", VirtualServer{Address: netip.MustParseAddr("fd00::a"), Protocol: SCTP, Port: 9, Scheduler: "wrr"}, "SCTP [fd00::a]:9 wrr"},
		{"persistent with mask", VirtualServer{Address: netip.MustParseAddr("1.2.3.4"), Protocol: TCP, Port: 80, Scheduler: "rr", Flags: FlagPersistent, Timeout: 360, Netmask: 0x00ffffff}, "TCP  1.2.3.4:80 rr persistent 360 mask 255.255.255.0"},
		{"sh flags", VirtualServer{Address: netip.MustParseAddr("1.2.3.4"), Protocol: TCP, Port: 80, Scheduler: "sh", Flags: FlagSched1 | FlagSched2}, "TCP  1.2.3.4:80 sh (sh-fallback,sh-port)"},
		{"one packet", VirtualServer{Address: netip.MustParseAddr("1.2.3.4"), Protocol: UDP, Port: 80, Scheduler: "rr", Flags: FlagOnePacket}, "UDP  1.2.3.4:80 rr ops"},
		{"fwmark", VirtualServer{FWMark: 12, Scheduler: "lc"}, "FWM  12 lc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ipvsadmService(tc.v); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestVirtualServerEqualAndString(t *testing.T) {
	a := vs("10.96.0.1", 443, "rr")
	b := a
	b.Flags &^= FlagHashed
	if !a.Equal(b) {
		t.Errorf("hashed flag must not matter")
	}
	b.Scheduler = "lc"
	if a.Equal(b) {
		t.Errorf("scheduler must matter")
	}
	if got := a.String(); got != "10.96.0.1:443/TCP" {
		t.Errorf("String = %q", got)
	}
	v6 := VirtualServer{Address: netip.MustParseAddr("fd00::1"), Protocol: UDP, Port: 53}
	if got := v6.String(); got != "[fd00::1]:53/UDP" {
		t.Errorf("String = %q", got)
	}
	r := rs("10.0.0.1", 80, 1, 2)
	r2 := rs("10.0.0.1", 80, 0, 0)
	if !r.Equal(r2) || r.String() != "10.0.0.1:80" {
		t.Errorf("RealServer Equal/String wrong: %v %q", r.Equal(r2), r.String())
	}
}

// TestIPVSAdmOrder checks the order ipvsadm 1.31 printed in the guest kernel
// for a table built with ipvsadm -R (pkg/ipvs/ipvs_guest_test.go), from a
// scrambled input.
func TestIPVSAdmOrder(t *testing.T) {
	v := func(a string, p Protocol, port uint16) VirtualServer {
		return VirtualServer{Address: netip.MustParseAddr(a), Protocol: p, Port: port}
	}
	in := Table{
		{Virtual: v("fd00:96::10", TCP, 80)},
		{Virtual: v("10.96.0.41", UDP, 5000)},
		{Virtual: v("fd00:96::a", UDP, 53)},
		{Virtual: v("10.96.0.1", TCP, 443), Real: []RealServer{rs("10.244.0.2", 6443, 0, 0), rs("10.244.0.1", 6443, 0, 0)}},
		{Virtual: v("10.96.0.30", TCP, 8080)},
		{Virtual: v("10.96.0.20", SCTP, 9000)},
		{Virtual: v("10.96.0.40", TCP, 80)},
		{Virtual: v("192.0.2.10", TCP, 80)},
		{Virtual: v("10.96.0.10", UDP, 53)},
		{Virtual: v("10.96.0.10", TCP, 53)},
		{Virtual: VirtualServer{FWMark: 7}},
	}
	var got []string
	for _, e := range in.ipvsadmSorted() {
		got = append(got, e.Virtual.String())
	}
	want := []string{"192.0.2.10:80/TCP", "10.96.0.1:443/TCP", "10.96.0.10:53/TCP", "10.96.0.30:8080/TCP", "10.96.0.40:80/TCP",
		"10.96.0.10:53/UDP", "10.96.0.41:5000/UDP", "10.96.0.20:9000/SCTP", "[fd00:96::10]:80/TCP", "[fd00:96::a]:53/UDP", "fwmark 7"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-ipvsadm +ours)\n%s", diff)
	}
	if r := in.ipvsadmSorted()[1].Real; r[0].Address.String() != "10.244.0.1" {
		t.Errorf("real servers not sorted: %v", r)
	}
}

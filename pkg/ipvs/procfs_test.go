// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// procCapture is /proc/net/ip_vs as the guest tier's Debian 12 kernel (6.1)
// printed it for TestGuestTableMatchesIPVSAdm's table: IPv4 and IPv6, TCP,
// UDP and SCTP, persistence, one-packet scheduling, every forwarding
// method, a virtual server without real servers and a firewall mark.
const procCapture = "testdata/proc-net-ip_vs-debian12.txt"

func TestParseProcIPVSCapture(t *testing.T) {
	data, err := os.ReadFile(procCapture)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseProcIPVS(data)
	if err != nil {
		t.Fatal(err)
	}
	vs := func(s string, port uint16, p Protocol) Key {
		return Key{Address: netip.MustParseAddr(s), Port: port, Protocol: p}
	}
	rs := func(s string, port uint16, f ForwardMethod, w int) RealServer {
		return RealServer{Address: netip.MustParseAddr(s), Port: port, Forward: f, Weight: w}
	}
	want := procRealServers{
		vs("10.96.0.10", 53, TCP):    {rs("10.244.1.2", 53, Masquerade, 1)},
		vs("10.96.0.10", 53, UDP):    {rs("10.244.1.3", 53, Masquerade, 5), rs("10.244.1.2", 53, Masquerade, 2)},
		vs("192.0.2.10", 80, TCP):    {rs("10.244.3.3", 80, DirectRoute, 1), rs("10.244.3.2", 80, Tunnel, 1)},
		vs("10.96.0.40", 80, TCP):    {rs("10.244.4.4", 8080, Masquerade, 0)},
		vs("10.96.0.30", 8080, TCP):  {},
		vs("10.96.0.20", 9000, SCTP): {rs("10.244.2.2", 9000, Masquerade, 1)},
		vs("fd00:96::a", 53, UDP):    {},
		vs("10.96.0.1", 443, TCP):    {rs("10.244.0.2", 6443, Masquerade, 3), rs("10.244.0.1", 6443, Masquerade, 1)},
		vs("10.96.0.41", 5000, UDP):  {rs("10.244.4.5", 5000, Masquerade, 1)},
		vs("fd00:96::10", 80, TCP):   {rs("fd00:244::20", 8080, Masquerade, 1)},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("parseProcIPVS (-want +got):\n%s", diff)
	}
}

func TestParseProcIPVS(t *testing.T) {
	const header = "IP Virtual Server version 1.2.1 (size=4096)\n" +
		"Prot LocalAddress:Port Scheduler Flags\n" +
		"  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
	for _, tc := range []struct {
		name    string
		text    string
		want    int // virtual servers
		wantErr string
	}{
		{name: "empty table", text: header},
		{name: "connections counted", text: header + "TCP  0A600001:01BB rr  \n  -> 0AF40001:192B      Masq    1      12         3400      \n", want: 1},
		{name: "a firewall mark and its real servers are skipped", text: header + "FWM  00000007 rr \n  -> 0AF40505:0000      Route   1      0          0\n", want: 0},
		{name: "an unnamed protocol is skipped", text: header + "IP_50  0A600001:0000 rr  \n  -> 0AF40505:0000      Route   1      0          0\n", want: 0},
		{name: "no trailing newline", text: header + "UDP  0A600001:0035 rr  \n  -> 0AF40001:0035      Masq    1      0          0", want: 1},
		{name: "not the IPVS file", text: "Inter-|   Receive\n", wantErr: "not an IPVS table"},
		{name: "short service line", text: header + "TCP  0A600001:01BB\n", wantErr: "want protocol, address and scheduler"},
		{name: "address not hex", text: header + "TCP  0A60000G:01BB rr\n", wantErr: "not 8 hex digits"},
		{name: "port too long", text: header + "TCP  0A600001:001BB rr\n", wantErr: "not 4 hex digits"},
		{name: "IPv4 in brackets", text: header + "TCP  [10.96.0.1]:01BB rr\n", wantErr: "not an IPv6 address"},
		{name: "real server with a missing column", text: header + "TCP  0A600001:01BB rr\n  -> 0AF40001:192B      Masq    1      0\n", wantErr: "want 5 fields"},
		{name: "unknown forwarding method", text: header + "TCP  0A600001:01BB rr\n  -> 0AF40001:192B      Bounce  1      0          0\n", wantErr: "unknown forwarding method"},
		{name: "weight not a number", text: header + "TCP  0A600001:01BB rr\n  -> 0AF40001:192B      Masq    x      0          0\n", wantErr: "invalid syntax"},
		{name: "virtual server twice", text: header + "TCP  0A600001:01BB rr\nTCP  0A600001:01BB lc\n", wantErr: "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcIPVS([]byte(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Errorf("%d virtual servers, want %d: %v", len(got), tc.want, got)
			}
		})
	}
}

// FuzzParseProcIPVS feeds arbitrary text to the /proc/net/ip_vs parser: it
// must never panic, and whatever it accepts holds only valid addresses.
func FuzzParseProcIPVS(f *testing.F) {
	if data, err := os.ReadFile(procCapture); err == nil {
		f.Add(data)
	}
	f.Add([]byte("IP Virtual Server version 1.2.1 (size=4096)\n\n\nTCP  [::1]:0050 rr\n  -> [::2]:0050 Local 1 0 0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseProcIPVS(data)
		if err != nil {
			return
		}
		for k, rs := range got {
			if !k.Address.IsValid() || k.FWMark != 0 {
				t.Fatalf("accepted an invalid key %#v", k)
			}
			for _, r := range rs {
				if !r.Address.IsValid() {
					t.Fatalf("accepted an invalid real server %#v", r)
				}
			}
		}
	})
}

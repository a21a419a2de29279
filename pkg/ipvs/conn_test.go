// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseConnCounts(t *testing.T) {
	const header = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n"
	vDNS := Key{Address: netip.MustParseAddr("10.96.0.10"), Protocol: UDP, Port: 53}
	vWeb := Key{Address: netip.MustParseAddr("fd00::a"), Protocol: TCP, Port: 80}
	tests := []struct {
		name    string
		in      string
		want    ConnCounts
		wantErr string
	}{
		{name: "empty table", in: header, want: ConnCounts{}},
		{
			name: "IPv4 UDP and TCP, counted per real server",
			in: header +
				"UDP 0A000001 C350 0A60000A 0035 0AF40002 0035 UDP         00:58\n" +
				"UDP 0A000001 C351 0A60000A 0035 0AF40002 0035 UDP         00:57\n" +
				"UDP 0A000001 C352 0A60000A 0035 0AF40003 0035 UDP         00:57\n",
			want: ConnCounts{
				{Virtual: vDNS, Real: netip.MustParseAddrPort("10.244.0.2:53")}: 2,
				{Virtual: vDNS, Real: netip.MustParseAddrPort("10.244.0.3:53")}: 1,
			},
		},
		{
			name: "IPv6 in brackets, kernel's full form",
			in: header +
				"TCP [fd00:0000:0000:0000:0000:0000:0000:0001] C350 [fd00:0000:0000:0000:0000:0000:0000:000a] 0050 [fd00:0000:0000:0000:0000:0000:0000:0002] 1F90 ESTABLISHED     897\n",
			want: ConnCounts{{Virtual: vWeb, Real: netip.MustParseAddrPort("[fd00::2]:8080")}: 1},
		},
		{
			name: "persistence templates are skipped",
			in:   header + "IP  0A000001 0000 0A60000A 0035 0AF40002 0035 NONE        06:00\n",
			want: ConnCounts{},
		},
		{name: "not the connection table", in: "IP Virtual Server version 1.2.1\n", wantErr: "not an IPVS connection table"},
		{name: "empty file", in: "", wantErr: "no header"},
		{name: "short line", in: header + "UDP 0A000001 C350\n", wantErr: "line 2: connection"},
		{name: "bad address", in: header + "UDP 0A000001 C350 0A6000ZZ 0035 0AF40002 0035 UDP 00:58\n", wantErr: "virtual address"},
		{name: "bad port", in: header + "UDP 0A000001 C350 0A60000A 35 0AF40002 0035 UDP 00:58\n", wantErr: "virtual port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConnCounts(strings.NewReader(tt.in), nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, n := range tt.want {
				if got[k] != n {
					t.Errorf("%v: got %d, want %d (all: %v)", k, got[k], n, got)
				}
			}
		})
	}
}

// FuzzParseConnCounts: any connection table parses or fails cleanly, and
// what a filter keeps is a subset of what parses without one.
func FuzzParseConnCounts(f *testing.F) {
	f.Add([]byte("Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\nUDP 0A000001 C350 0A60000A 0035 0AF40002 0035 UDP         00:58\n"))
	f.Add([]byte("Pro x\nTCP [fd00::1] C350 [fd00::a] 0050 [fd00::2] 1F90 ESTABLISHED 897\nIP  0A000001 0000 0A60000A 0035 0AF40002 0035 NONE 06:00\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		all, err := ParseConnCounts(strings.NewReader(string(b)), nil)
		if err != nil {
			return
		}
		some, err := ParseConnCounts(strings.NewReader(string(b)), func(k ConnKey) bool { return k.Real.Port()%2 == 0 })
		if err != nil {
			t.Fatalf("parses without a filter, not with one: %v", err)
		}
		for k, n := range some {
			if all[k] != n || k.Real.Port()%2 != 0 {
				t.Fatalf("%v: %d with the filter, %d without", k, n, all[k])
			}
		}
	})
}

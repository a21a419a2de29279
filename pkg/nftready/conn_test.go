// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// connTable is /proc/net/ip_vs_conn as kernel 6.1 prints it.
const connTable = `Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP C0A8010B D431 0A00000A 7580 0AF40005 1F90 ESTABLISHED     899
UDP C0A8010B 9C41 0A60000A 0035 0AF40006 0035 UDP             297
TCP fd00:0000:0000:0000:0000:0000:0000:0001 D432 fd00:0000:0000:0000:0000:0000:0000:000a 0050 fd00:0000:0000:0000:0000:0000:0000:0005 1F90 TIME_WAIT        59
XYZ C0A8010B D431 0A00000A 7580 0AF40005 1F90 ESTABLISHED     899
`

func TestReadConnections(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Conn
		wantErr string
	}{
		{name: "kernel table", in: connTable, want: []Conn{
			{Protocol: ipvs.TCP, Client: netip.MustParseAddrPort("192.168.1.11:54321"), VAddr: netip.MustParseAddr("10.0.0.10"), VPort: 30080, Dest: netip.MustParseAddrPort("10.244.0.5:8080"), State: "ESTABLISHED"},
			{Protocol: ipvs.UDP, Client: netip.MustParseAddrPort("192.168.1.11:40001"), VAddr: netip.MustParseAddr("10.96.0.10"), VPort: 53, Dest: netip.MustParseAddrPort("10.244.0.6:53"), State: "UDP"},
			{Protocol: ipvs.TCP, Client: netip.MustParseAddrPort("[fd00::1]:54322"), VAddr: netip.MustParseAddr("fd00::a"), VPort: 80, Dest: netip.MustParseAddrPort("[fd00::5]:8080"), State: "TIME_WAIT"},
		}},
		{name: "empty", in: ""},
		{name: "header only", in: "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n"},
		{name: "short line", in: "TCP C0A8010B D431\n", wantErr: "line 1"},
		{name: "bad address", in: "TCP C0A8010Z D431 0A00000A 7580 0AF40005 1F90 ESTABLISHED 1\n", wantErr: "address"},
		{name: "bad port", in: "TCP C0A8010B D43100 0A00000A 7580 0AF40005 1F90 ESTABLISHED 1\n", wantErr: "port"},
		{name: "line too long", in: "TCP " + strings.Repeat("A", maxConnLine+1) + "\n", wantErr: "after line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Conn
			err := ReadConnections(strings.NewReader(tt.in), func(c Conn) { got = append(got, c) })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d conns %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("conn %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// FuzzReadConnections: any input is parsed or refused with an error, never
// a panic, and every entry returned has valid addresses.
func FuzzReadConnections(f *testing.F) {
	f.Add(connTable)
	f.Add("TCP C0A8010B D431 0A00000A 7580 0AF40005 1F90 ESTABLISHED 899\n")
	f.Add("TCP ::ffff:10.0.0.1 0050 fe80::1%eth0 0050 ::1 0050 SYN_RECV 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		_ = ReadConnections(strings.NewReader(in), func(c Conn) {
			if !c.VAddr.IsValid() || !c.Client.Addr().IsValid() || !c.Dest.Addr().IsValid() {
				t.Fatalf("invalid address in %+v", c)
			}
			if c.VAddr.Zone() != "" || c.VAddr.Is4In6() {
				t.Fatalf("zone or mapped address in %+v", c)
			}
		})
	})
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ipvs

import (
	"encoding/binary"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink/nl"
)

// destMessage builds an IPVS_CMD_NEW_DEST message body as the kernel's
// ip_vs_genl_fill_dest does (genl header, nested IPVS_CMD_ATTR_DEST).
func destMessage(addr net.IP, family uint16, port uint16, fwd, weight, active, inactive uint32, withFamily bool) []byte {
	a := nl.NewRtAttr(ipvsCmdAttrDest, nil)
	raw := make([]byte, 16)
	if family == syscall.AF_INET {
		copy(raw, addr.To4())
	} else {
		copy(raw, addr.To16())
	}
	a.AddRtAttr(ipvsDestAttrAddr, raw)
	if withFamily {
		a.AddRtAttr(ipvsDestAttrAF, nl.Uint16Attr(family))
	}
	p := make([]byte, 2)
	binary.BigEndian.PutUint16(p, port)
	a.AddRtAttr(ipvsDestAttrPort, p)
	a.AddRtAttr(ipvsDestAttrFwd, nl.Uint32Attr(fwd))
	a.AddRtAttr(ipvsDestAttrWeight, nl.Uint32Attr(weight))
	a.AddRtAttr(ipvsDestAttrActive, nl.Uint32Attr(active))
	a.AddRtAttr(ipvsDestAttrInactive, nl.Uint32Attr(inactive))
	return append([]byte{5 /* IPVS_CMD_NEW_DEST */, 1, 0, 0}, a.Serialize()...)
}

func TestParseDestMessage(t *testing.T) {
	tests := []struct {
		name      string
		msg       []byte
		svcFamily uint16
		want      RealServer
		wantErr   bool
	}{
		{name: "ipv4 masq", msg: destMessage(net.ParseIP("10.244.1.11"), syscall.AF_INET, 8080, 0, 1, 2, 3, true), svcFamily: syscall.AF_INET,
			want: RealServer{Address: netip.MustParseAddr("10.244.1.11"), Port: 8080, Weight: 1, Forward: Masquerade, ActiveConn: 2, InactiveConn: 3}},
		{name: "ipv6 tunnel", msg: destMessage(net.ParseIP("fd00::2"), syscall.AF_INET6, 80, 2, 7, 0, 0, true), svcFamily: syscall.AF_INET6,
			want: RealServer{Address: netip.MustParseAddr("fd00::2"), Port: 80, Weight: 7, Forward: Tunnel}},
		{name: "old kernel without family", msg: destMessage(net.ParseIP("10.0.0.1"), syscall.AF_INET, 53, 3, 1, 0, 0, false), svcFamily: syscall.AF_INET,
			want: RealServer{Address: netip.MustParseAddr("10.0.0.1"), Port: 53, Weight: 1, Forward: DirectRoute}},
		{name: "short", msg: []byte{5, 1}, wantErr: true},
		{name: "no dest attribute", msg: []byte{5, 1, 0, 0}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := parseDestMessage(tc.msg, tc.svcFamily)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			got, err := fromMobyDestination(d)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestServiceSelector(t *testing.T) {
	b := serviceSelector(&mobyipvs.Service{Address: net.IP{10, 96, 0, 1}, AddressFamily: syscall.AF_INET, Protocol: 6, Port: 443}).Serialize()
	attrs, err := nl.ParseRouteAttr(b[4:])
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint16][]byte{}
	for _, a := range attrs {
		got[a.Attr.Type] = a.Value
	}
	if string(got[ipvsSvcAttrAddr]) != string([]byte{10, 96, 0, 1}) || binary.BigEndian.Uint16(got[ipvsSvcAttrPort]) != 443 || got[ipvsSvcAttrFWMark] != nil {
		t.Errorf("selector attributes = %v", got)
	}
}

func FuzzParseDestMessage(f *testing.F) {
	f.Add(destMessage(net.ParseIP("10.244.1.11"), syscall.AF_INET, 8080, 0, 1, 2, 3, true), uint16(syscall.AF_INET))
	f.Add(destMessage(net.ParseIP("fd00::2"), syscall.AF_INET6, 80, 2, 7, 0, 0, true), uint16(syscall.AF_INET6))
	f.Fuzz(func(t *testing.T, msg []byte, fam uint16) {
		d, err := parseDestMessage(msg, fam)
		if err != nil {
			return
		}
		if _, err := fromMobyDestination(d); err != nil {
			t.Fatalf("parsed a destination that does not convert: %+v: %v", d, err)
		}
	})
}

// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// capturedAdvertisement is a real neighbour advertisement captured on the
// netns topology: the kernel of 1a:4b:35:79:3f:fa answering ndisc6's
// solicitation for fd00:77::11 sent from fe80::ca0:8dff:fe9b:b2a1
// (0e:a0:8d:9b:b2:a1); flags solicited and override, target link-layer
// address option.
const capturedAdvertisement = "0ea08d9bb2a11a4b35793ffa86dd6000000000203afffd000077000000000000000000000011fe800000000000000ca08dfffe9bb2a1" +
	"8800407560000000fd00007700000000000000000000001102011a4b35793ffa"

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// icmp6Checksum is RFC 4443 §2.3's checksum (RFC 1071 sum over the IPv6
// pseudo-header and the message), written out independently of gopacket.
func icmp6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var l [8]byte
	binary.BigEndian.PutUint32(l[:4], uint32(len(msg)))
	l[7] = 58
	add(l[:])
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func TestSolicitedNode(t *testing.T) {
	tests := []struct{ ip, group, mac string }{
		{ip: "fd00:77::11", group: "ff02::1:ff00:11", mac: "33:33:ff:00:00:11"},
		{ip: "2001:db8::abcd:ef12:3456", group: "ff02::1:ff12:3456", mac: "33:33:ff:12:34:56"},
		{ip: "fe80::ca0:8dff:fe9b:b2a1", group: "ff02::1:ff9b:b2a1", mac: "33:33:ff:9b:b2:a1"},
	}
	for _, tt := range tests {
		g, m := SolicitedNode(netip.MustParseAddr(tt.ip))
		if g.String() != tt.group || m.String() != tt.mac {
			t.Errorf("SolicitedNode(%s) = %s, %s; want %s, %s", tt.ip, g, m, tt.group, tt.mac)
		}
	}
}

func TestBuildSolicitation(t *testing.T) {
	mac := mustMAC(t, "0e:a0:8d:9b:b2:a1")
	src := netip.MustParseAddr("fe80::ca0:8dff:fe9b:b2a1")
	target := netip.MustParseAddr("fd00:77::11")
	got, err := BuildSolicitation(mac, src, target)
	if err != nil {
		t.Fatal(err)
	}
	group := netip.MustParseAddr("ff02::1:ff00:11")
	msg := mustHex(t, "8700"+"0000"+"00000000"+"fd000077000000000000000000000011"+"0101"+"0ea08d9bb2a1")
	binary.BigEndian.PutUint16(msg[2:], icmp6Checksum(src, group, msg))
	want := "3333ff000011" + "0ea08d9bb2a1" + "86dd" + // Ethernet: solicited-node group, from us, IPv6
		"60000000" + "0020" + "3a" + "ff" + // IPv6: 32 bytes of ICMPv6, hop limit 255
		"fe800000000000000ca08dfffe9bb2a1" + "ff0200000000000000000001ff000011" +
		hex.EncodeToString(msg)
	if diff := cmp.Diff(want, hex.EncodeToString(got)); diff != "" {
		t.Errorf("frame (-want +got):\n%s", diff)
	}

	// From ::, as in duplicate address detection: no source link-layer option.
	got, err = BuildSolicitation(mac, netip.IPv6Unspecified(), target)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 14+40+24 {
		t.Errorf("solicitation from :: is %d bytes, want %d (no option)", len(got), 14+40+24)
	}
	if _, s, tg, err := parseSolicitation(got); err != nil || !s.IsUnspecified() || tg != target {
		t.Errorf("solicitation from ::: src %s target %s err %v", s, tg, err)
	}
}

func TestBuildSolicitationRejects(t *testing.T) {
	v6 := netip.MustParseAddr("fd00::1")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	tests := []struct {
		name        string
		mac         net.HardwareAddr
		src, target netip.Addr
	}{
		{name: "short MAC", mac: mac[:4], src: v6, target: v6},
		{name: "IPv4 target", mac: mac, src: v6, target: netip.MustParseAddr("10.0.0.1")},
		{name: "IPv4-mapped target", mac: mac, src: v6, target: netip.MustParseAddr("::ffff:10.0.0.1")},
		{name: "multicast target", mac: mac, src: v6, target: netip.MustParseAddr("ff02::1")},
		{name: "unspecified target", mac: mac, src: v6, target: netip.IPv6Unspecified()},
		{name: "IPv4 source", mac: mac, src: netip.MustParseAddr("10.0.0.1"), target: v6},
		{name: "invalid source", mac: mac, target: v6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := BuildSolicitation(tt.mac, tt.src, tt.target); err == nil {
				t.Error("BuildSolicitation succeeded")
			}
		})
	}
}

func TestParseAdvertisementCaptured(t *testing.T) {
	frame := mustHex(t, capturedAdvertisement)
	got, err := ParseAdvertisement(frame)
	if err != nil {
		t.Fatal(err)
	}
	want := Advertisement{
		Reply: Reply{
			SenderMAC: mustMAC(t, "1a:4b:35:79:3f:fa"),
			SenderIP:  netip.MustParseAddr("fd00:77::11"),
			TargetMAC: mustMAC(t, "0e:a0:8d:9b:b2:a1"),
			TargetIP:  netip.MustParseAddr("fe80::ca0:8dff:fe9b:b2a1"),
		},
		Solicited: true,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("advertisement (-want +got):\n%s", diff)
	}
	// The copies must not alias the frame.
	frame[len(frame)-6] = 0xee
	if got.SenderMAC[0] == 0xee {
		t.Error("ParseAdvertisement result aliases the frame buffer")
	}
}

func TestParseAdvertisementRejects(t *testing.T) {
	na := mustHex(t, capturedAdvertisement)
	ns, err := BuildSolicitation(mustMAC(t, "0e:a0:8d:9b:b2:a1"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fd00:77::11"))
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(off int, b byte) []byte {
		f := append([]byte(nil), na...)
		f[off] = b
		return f
	}
	// withChecksum fixes the checksum after a change, so only the change is judged.
	withChecksum := func(f []byte) []byte {
		src, _ := netip.AddrFromSlice(f[22:38])
		dst, _ := netip.AddrFromSlice(f[38:54])
		msg := append([]byte(nil), f[54:]...)
		msg[2], msg[3] = 0, 0
		binary.BigEndian.PutUint16(f[56:], icmp6Checksum(src, dst, msg))
		return f
	}
	// A target link-layer option of 16 bytes (14 of address): 8 more bytes
	// of payload, option length 2.
	longOption := append(mutate(19, 32+8), make([]byte, 8)...)
	longOption[79] = 2
	tests := []struct {
		name  string
		frame []byte
		notNA bool // well-formed but not an acceptable advertisement
	}{
		{name: "empty", frame: nil},
		{name: "short Ethernet", frame: na[:10]},
		{name: "short IPv6", frame: na[:14+30]},
		{name: "short ICMPv6", frame: na[:14+40+2]},
		{name: "short advertisement", frame: withChecksum(mutate(19, 12)[:14+40+12])},
		{name: "solicitation (our own, looped back)", frame: ns, notNA: true},
		{name: "ARP EtherType", frame: mutate(13, 0x06), notNA: true},
		{name: "UDP next header", frame: mutate(20, 17), notNA: true},
		{name: "hop limit 254 (routed from off-link)", frame: mutate(21, 254), notNA: true},
		{name: "bad checksum", frame: mutate(57, 0x76)},
		{name: "code 1", frame: withChecksum(mutate(55, 1)), notNA: true},
		{name: "multicast target", frame: withChecksum(mutate(62, 0xff)), notNA: true},
		{name: "target option of 14 bytes", frame: withChecksum(longOption), notNA: true},
		{name: "zero-length option", frame: withChecksum(mutate(79, 0))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAdvertisement(tt.frame)
			if err == nil {
				t.Fatal("ParseAdvertisement accepted it")
			}
			if tt.notNA && !errors.Is(err, errNotAdvertisement) {
				t.Errorf("error %v, want errNotAdvertisement", err)
			}
		})
	}
}

// TestReaderNDP feeds advertisements to an IPv6 prober's reader: only
// solicited answers addressed to us count, and from :: only answers to all
// nodes.
func TestReaderNDP(t *testing.T) {
	me := mustMAC(t, "0e:a0:8d:9b:b2:a1")
	ll := netip.MustParseAddr("fe80::ca0:8dff:fe9b:b2a1")
	target := netip.MustParseAddr("fd00:77::11")
	them := mustMAC(t, "1a:4b:35:79:3f:fa")
	other := mustMAC(t, "52:54:00:00:00:99")
	allNodesMAC := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	adv := func(mac net.HardwareAddr, dstMAC net.HardwareAddr, dst netip.Addr, solicited bool) []byte {
		b, err := buildAdvertisement(mac, target, dstMAC, dst, solicited)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		src   netip.Addr
		frame []byte
		want  int
	}{
		{name: "captured kernel answer", src: ll, frame: mustHex(t, capturedAdvertisement), want: 1},
		{name: "solicited, to us", src: ll, frame: adv(them, me, ll, true), want: 1},
		{name: "unsolicited announcement to all nodes", src: ll, frame: adv(them, allNodesMAC, allNodes, false), want: 0},
		{name: "solicited, to another host", src: ll, frame: adv(them, other, netip.MustParseAddr("fe80::99"), true), want: 0},
		{name: "our own MAC", src: ll, frame: adv(me, me, ll, true), want: 0},
		{name: "from ::, answer to all nodes", src: netip.IPv6Unspecified(), frame: adv(them, allNodesMAC, allNodes, false), want: 1},
		{name: "from ::, unicast answer to someone", src: netip.IPv6Unspecified(), frame: adv(them, me, ll, true), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			st := &probeState{ip: target, sends: []time.Time{time.Now()}}
			r := &reader{mac: me, src: tt.src, states: map[netip.Addr]*probeState{target: st}, mu: &mu}
			r.handle(tt.frame, time.Now(), time.Time{})
			if len(st.macs) != tt.want {
				t.Errorf("recorded %v, want %d responder(s)", st.macs, tt.want)
			}
		})
	}
}

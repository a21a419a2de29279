// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuildRequest(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	got, err := BuildRequest(mac, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ffffffffffff" + "020000000001" + "0806" + // Ethernet: broadcast, from us, ARP
		"0001" + "0800" + "06" + "04" + "0001" + // Ethernet/IPv4, request
		"020000000001" + "0a000001" + // sender
		"000000000000" + "0a000009" + // target
		"000000000000000000000000000000000000" // padding to 60 bytes
	if diff := cmp.Diff(want, hex.EncodeToString(got)); diff != "" {
		t.Errorf("frame (-want +got):\n%s", diff)
	}
}

func TestBuildRequestRejects(t *testing.T) {
	v4 := netip.MustParseAddr("10.0.0.1")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	tests := []struct {
		name        string
		mac         net.HardwareAddr
		src, target netip.Addr
	}{
		{name: "short MAC", mac: mac[:4], src: v4, target: v4},
		{name: "IPv6 target", mac: mac, src: v4, target: netip.MustParseAddr("fd00::1")},
		{name: "invalid source", mac: mac, target: v4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := BuildRequest(tt.mac, tt.src, tt.target); err == nil {
				t.Error("BuildRequest succeeded")
			}
		})
	}
}

func TestParseReplyRoundTrip(t *testing.T) {
	mac := mustMAC(t, "52:54:00:12:34:56")
	req := mustMAC(t, "02:00:00:00:00:01")
	frame := buildReply(t, mac, netip.MustParseAddr("10.0.0.9"), req, netip.MustParseAddr("10.0.0.1"))
	got, err := ParseReply(frame)
	if err != nil {
		t.Fatal(err)
	}
	want := Reply{SenderMAC: mac, SenderIP: netip.MustParseAddr("10.0.0.9"), TargetMAC: req, TargetIP: netip.MustParseAddr("10.0.0.1")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	// The copies must not alias the frame.
	frame[6+14+8] = 0xee
	if got.SenderMAC[0] == 0xee {
		t.Error("ParseReply result aliases the frame buffer")
	}
}

func TestParseReplyRejects(t *testing.T) {
	mac := mustMAC(t, "52:54:00:12:34:56")
	reply := buildReply(t, mac, netip.MustParseAddr("10.0.0.9"), mac, netip.MustParseAddr("10.0.0.1"))
	request, err := BuildRequest(mac, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(off int, b byte) []byte {
		f := append([]byte(nil), reply...)
		f[off] = b
		return f
	}
	tests := []struct {
		name    string
		frame   []byte
		notARP  bool // well-formed but not a reply
		wantErr bool
	}{
		{name: "empty", frame: nil, wantErr: true},
		{name: "short Ethernet", frame: reply[:10], wantErr: true},
		{name: "short ARP", frame: reply[:14+20], wantErr: true},
		{name: "request (our own, looped back)", frame: request, notARP: true},
		{name: "IPv4 EtherType", frame: mutate(13, 0x00), notARP: true},
		{name: "hardware type not Ethernet", frame: mutate(15, 0x06), notARP: true},
		{name: "protocol not IPv4", frame: mutate(16, 0x86), notARP: true},
		{name: "hardware size 8", frame: mutate(18, 8), notARP: true},
		{name: "operation RARP", frame: mutate(21, 4), notARP: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseReply(tt.frame)
			if err == nil {
				t.Fatal("ParseReply accepted it")
			}
			if tt.notARP && !errors.Is(err, errNotReply) {
				t.Errorf("error %v, want errNotReply", err)
			}
		})
	}
}

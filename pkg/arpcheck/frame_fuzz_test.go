// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// Real frames captured on the netns topology (veth, so unpadded 42 bytes):
// two hosts answering for the same address 10.77.0.11 to 10.77.0.1.
var capturedReplies = []string{
	"0ea08d9bb2a11a4b35793ffa080600010800060400021a4b35793ffa0a4d000b0ea08d9bb2a10a4d0001",
	"0ea08d9bb2a1ca834074811608060001080006040002ca83407481160a4d000b0ea08d9bb2a10a4d0001",
}

// FuzzParseReply feeds arbitrary frames to the reply parser and to the
// prober's frame handler: neither may panic, and whatever the parser accepts
// must be a well-formed IPv4-over-Ethernet reply that survives a rebuild.
func FuzzParseReply(f *testing.F) {
	for _, h := range capturedReplies {
		b, err := hex.DecodeString(h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, make([]byte, 18)...)) // as padded by a NIC
		f.Add(b[:30])
	}
	req, err := BuildRequest(proberMAC, proberIP, netip.MustParseAddr("10.77.0.11"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(req)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		rep, err := ParseReply(frame)
		if err == nil {
			if len(rep.SenderMAC) != 6 || len(rep.TargetMAC) != 6 || !rep.SenderIP.Is4() || !rep.TargetIP.Is4() {
				t.Fatalf("accepted a malformed reply: %+v", rep)
			}
			again, err := ParseReply(buildReply(t, rep.SenderMAC, rep.SenderIP, rep.TargetMAC, rep.TargetIP))
			if err != nil || !bytes.Equal(again.SenderMAC, rep.SenderMAC) || again.SenderIP != rep.SenderIP || again.TargetIP != rep.TargetIP {
				t.Fatalf("rebuilt reply differs: %+v vs %+v (%v)", again, rep, err)
			}
		}
		var mu sync.Mutex
		st := &probeState{ip: netip.MustParseAddr("10.77.0.11"), sends: []time.Time{time.Now()}}
		r := &reader{mac: proberMAC, src: netip.MustParseAddr("10.77.0.1"), states: map[netip.Addr]*probeState{st.ip: st}, mu: &mu}
		r.handle(frame, time.Now(), time.Time{})
		if len(st.macs) > 1 || len(st.macs) != len(st.arrived) {
			t.Fatalf("one frame recorded %d responders", len(st.macs))
		}
	})
}

func TestCapturedRepliesConflict(t *testing.T) {
	var mu sync.Mutex
	st := &probeState{ip: netip.MustParseAddr("10.77.0.11"), sends: []time.Time{time.Now()}}
	r := &reader{mac: mustMAC(t, "0e:a0:8d:9b:b2:a1"), src: netip.MustParseAddr("10.77.0.1"), states: map[netip.Addr]*probeState{st.ip: st}, mu: &mu}
	for _, h := range capturedReplies {
		b, _ := hex.DecodeString(h)
		r.handle(b, time.Now(), time.Time{})
		r.handle(b, time.Now(), time.Time{}) // a duplicate counts once
	}
	if got := classify(st.macs, nil); got != ResultConflict || len(st.macs) != 2 {
		t.Errorf("captured replies gave %s with %v", got, st.macs)
	}
}

// FuzzParseAdvertisement feeds arbitrary frames to the advertisement parser
// and to an IPv6 prober's frame handler: neither may panic, and whatever the
// parser accepts must be a well-formed advertisement (6-byte MACs, a unicast
// IPv6 target) that survives a rebuild.
func FuzzParseAdvertisement(f *testing.F) {
	na, err := hex.DecodeString(capturedAdvertisement)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(na)
	f.Add(na[:60])
	f.Add(append(append([]byte(nil), na...), make([]byte, 8)...))
	ns, err := BuildSolicitation(proberMAC, netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fd00:77::11"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ns)
	f.Add([]byte{})
	me := net.HardwareAddr{0x0e, 0xa0, 0x8d, 0x9b, 0xb2, 0xa1}
	ll := netip.MustParseAddr("fe80::ca0:8dff:fe9b:b2a1")
	f.Fuzz(func(t *testing.T, frame []byte) {
		adv, err := ParseAdvertisement(frame)
		if err == nil {
			if len(adv.SenderMAC) != 6 || len(adv.TargetMAC) != 6 || !adv.SenderIP.Is6() || adv.SenderIP.IsMulticast() || !adv.TargetIP.Is6() {
				t.Fatalf("accepted a malformed advertisement: %+v", adv)
			}
			b, err := buildAdvertisement(adv.SenderMAC, adv.SenderIP, adv.TargetMAC, adv.TargetIP, adv.Solicited)
			if err != nil {
				t.Fatal(err)
			}
			again, err := ParseAdvertisement(b)
			if err != nil || !bytes.Equal(again.SenderMAC, adv.SenderMAC) || again.SenderIP != adv.SenderIP || again.TargetIP != adv.TargetIP || again.Solicited != adv.Solicited {
				t.Fatalf("rebuilt advertisement differs: %+v vs %+v (%v)", again, adv, err)
			}
		}
		var mu sync.Mutex
		st := &probeState{ip: netip.MustParseAddr("fd00:77::11"), sends: []time.Time{time.Now()}}
		r := &reader{mac: me, src: ll, states: map[netip.Addr]*probeState{st.ip: st}, mu: &mu}
		r.handle(frame, time.Now(), time.Time{})
		if len(st.macs) > 1 || len(st.macs) != len(st.arrived) {
			t.Fatalf("one frame recorded %d responders", len(st.macs))
		}
	})
}

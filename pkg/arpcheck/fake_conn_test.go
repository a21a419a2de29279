// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// fakeConn is an in-memory PacketConn. Written frames go to respond, which
// may schedule frames to be read; read deadlines behave like a real socket's.
type fakeConn struct {
	mu       sync.Mutex
	queue    [][]byte
	deadline time.Time
	kick     chan struct{}
	closed   bool
	written  [][]byte
	// loopback makes every written frame readable too, as a socket that
	// sees outgoing frames (ETH_P_ALL) would.
	loopback bool
	// syncReply makes WriteTo return only after the reader has taken every
	// queued frame, as on a veth where the reply is queued inside sendto.
	syncReply bool
	respond   func(c *fakeConn, frame []byte)
}

func newFakeConn(respond func(c *fakeConn, frame []byte)) *fakeConn {
	return &fakeConn{kick: make(chan struct{}, 1), respond: respond}
}

func (c *fakeConn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// deliver makes frame readable now.
func (c *fakeConn) deliver(frame []byte) {
	c.mu.Lock()
	c.queue = append(c.queue, frame)
	c.mu.Unlock()
	c.wake()
}

// deliverAfter makes frame readable after d.
func (c *fakeConn) deliverAfter(d time.Duration, frame []byte) {
	time.AfterFunc(d, func() { c.deliver(frame) })
}

func (c *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, nil, net.ErrClosed
		}
		if len(c.queue) > 0 {
			f := c.queue[0]
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return copy(b, f), nil, nil
		}
		dl := c.deadline
		c.mu.Unlock()
		var (
			timeout <-chan time.Time
			timer   *time.Timer
		)
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, nil, os.ErrDeadlineExceeded
			}
			timer = time.NewTimer(d)
			timeout = timer.C
		}
		select {
		case <-c.kick:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (c *fakeConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	f := append([]byte(nil), b...)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	c.written = append(c.written, f)
	loop := c.loopback
	c.mu.Unlock()
	if loop {
		c.deliver(f)
	}
	if c.respond != nil {
		c.respond(c, f)
	}
	if c.syncReply {
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			c.mu.Lock()
			n := len(c.queue)
			c.mu.Unlock()
			if n == 0 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // let the reader handle it
	}
	return len(b), nil
}

func (c *fakeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	c.wake()
	return nil
}

func (c *fakeConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wake()
	return nil
}

func (c *fakeConn) writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.written)
}

var errNotRequest = errors.New("not an ARP request")

// parseRequest decodes a request the prober wrote (test side): an ARP
// request or a neighbour solicitation.
func parseRequest(frame []byte) (srcMAC net.HardwareAddr, src, target netip.Addr, err error) {
	var eth layers.Ethernet
	if err := eth.DecodeFromBytes(frame, gopacket.NilDecodeFeedback); err != nil {
		return nil, src, target, err
	}
	if eth.EthernetType == layers.EthernetTypeIPv6 {
		return parseSolicitation(frame)
	}
	var arp layers.ARP
	if err := arp.DecodeFromBytes(eth.Payload, gopacket.NilDecodeFeedback); err != nil {
		return nil, src, target, err
	}
	if arp.Operation != layers.ARPRequest {
		return nil, src, target, errNotRequest
	}
	src, _ = netip.AddrFromSlice(arp.SourceProtAddress)
	target, _ = netip.AddrFromSlice(arp.DstProtAddress)
	return net.HardwareAddr(arp.SourceHwAddress), src, target, nil
}

// parseSolicitation decodes a neighbour solicitation (test side) as the
// kernel does: hop limit 255, valid checksum, the source link-layer option.
func parseSolicitation(frame []byte) (srcMAC net.HardwareAddr, src, target netip.Addr, err error) {
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	ip6, _ := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	ns, _ := pkt.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	if ip6 == nil || icmp == nil || ns == nil || ip6.HopLimit != 255 {
		return nil, src, target, errNotRequest
	}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		return nil, src, target, err
	}
	if err, sum := icmp.VerifyChecksum(); err != nil || !sum.Valid {
		return nil, src, target, errors.New("bad ICMPv6 checksum")
	}
	src, _ = netip.AddrFromSlice(ip6.SrcIP)
	target, _ = netip.AddrFromSlice(ns.TargetAddress)
	srcMAC = net.HardwareAddr{}
	for _, o := range ns.Options {
		if o.Type == layers.ICMPv6OptSourceAddress {
			srcMAC = net.HardwareAddr(o.Data)
		}
	}
	return srcMAC, src, target, nil
}

// buildReply builds the frame a host with mac sends to answer a request
// from reqMAC/reqIP for ip: an ARP reply, or for IPv6 a neighbour
// advertisement (to all nodes when the solicitation came from ::).
func buildReply(t testing.TB, mac net.HardwareAddr, ip netip.Addr, reqMAC net.HardwareAddr, reqIP netip.Addr) []byte {
	t.Helper()
	if ip.Is6() {
		dstMAC, dst, solicited := reqMAC, reqIP, true
		if reqIP.IsUnspecified() {
			dstMAC, dst, solicited = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, allNodes, false
		}
		b, err := buildAdvertisement(mac, ip, dstMAC, dst, solicited)
		if err != nil {
			t.Fatalf("building advertisement: %v", err)
		}
		return b
	}
	ip4, req4 := ip.As4(), reqIP.As4()
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true},
		&layers.Ethernet{SrcMAC: mac, DstMAC: reqMAC, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{
			AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			Operation:       layers.ARPReply,
			SourceHwAddress: mac, SourceProtAddress: ip4[:],
			DstHwAddress: reqMAC, DstProtAddress: req4[:],
		})
	if err != nil {
		t.Fatalf("building reply: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func mustMAC(t testing.TB, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// responder is a simulated host on the fake segment.
type responder struct {
	mac   net.HardwareAddr
	ips   []netip.Addr
	delay time.Duration
	// skip ignores the first skip requests (a lost frame).
	skip int
	// copies sends each reply this many times (at least once).
	copies int
}

// segment returns a respond func simulating hosts on one segment.
func segment(t testing.TB, hosts ...*responder) func(c *fakeConn, frame []byte) {
	var mu sync.Mutex
	return func(c *fakeConn, frame []byte) {
		reqMAC, reqIP, target, err := parseRequest(frame)
		if err != nil {
			return
		}
		for _, h := range hosts {
			for _, ip := range h.ips {
				if ip != target {
					continue
				}
				mu.Lock()
				skip := h.skip > 0
				if skip {
					h.skip--
				}
				mu.Unlock()
				if skip {
					continue
				}
				n := max(h.copies, 1)
				for range n {
					if h.delay == 0 && c.syncReply {
						c.deliver(buildReply(t, h.mac, ip, reqMAC, reqIP))
						continue
					}
					c.deliverAfter(h.delay, buildReply(t, h.mac, ip, reqMAC, reqIP))
				}
			}
		}
	}
}

// fakeNetwork routes every IP to one of its interfaces (by Target.Interface
// or to the first) and hands out fake sockets.
type fakeNetwork struct {
	routes  map[string]Route
	first   string
	hosts   []*responder
	t       testing.TB
	noRoute map[netip.Addr]error
	mu      sync.Mutex
	conns   []*fakeConn
}

func (n *fakeNetwork) Route(_ context.Context, ip netip.Addr, iface string) (Route, error) {
	if err, ok := n.noRoute[ip]; ok {
		return Route{}, err
	}
	if iface == "" {
		iface = n.first
	}
	r, ok := n.routes[iface]
	if !ok {
		return Route{}, errors.New("no such interface")
	}
	if ip.Is6() {
		r.Src = linkLocal(r.MAC)
	}
	return r, nil
}

func (n *fakeNetwork) Listen(_ context.Context, r Route) (Socket, net.Addr, error) {
	c := newFakeConn(segment(n.t, n.hosts...))
	c.loopback = true
	n.mu.Lock()
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	return c, nil, nil
}

// linkLocal returns the EUI-64 link-local address of mac, as the kernel
// gives an Ethernet interface.
func linkLocal(mac net.HardwareAddr) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]})
}

// buildAdvertisement returns a neighbour advertisement from mac for target,
// sent to dstMAC/dstIP, with the solicited and override flags set and the
// target link-layer address option (as Linux answers a solicitation).
func buildAdvertisement(mac net.HardwareAddr, target netip.Addr, dstMAC net.HardwareAddr, dstIP netip.Addr, solicited bool) ([]byte, error) {
	eth := &layers.Ethernet{SrcMAC: mac, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv6}
	ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: ndpHopLimit, SrcIP: target.AsSlice(), DstIP: dstIP.AsSlice()}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		return nil, err
	}
	flags := uint8(0x20) // override
	if solicited {
		flags |= 0x40
	}
	na := &layers.ICMPv6NeighborAdvertisement{
		Flags:         flags,
		TargetAddress: target.AsSlice(),
		Options:       layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: mac}},
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip6, icmp, na); err != nil {
		return nil, fmt.Errorf("serialising neighbour advertisement for %s: %w", target, err)
	}
	return buf.Bytes(), nil
}

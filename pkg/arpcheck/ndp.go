// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// ndpHopLimit is the hop limit of every neighbour discovery message; a
// receiver drops any other value, so a message cannot come from off-link
// (RFC 4861 §7.1).
const ndpHopLimit = 255

// allNodes is ff02::1, where an advertisement answering a solicitation from
// the unspecified address goes (RFC 4861 §7.2.4).
var allNodes = netip.MustParseAddr("ff02::1")

// errNotAdvertisement is returned by ParseAdvertisement for a well-formed
// frame that is not a neighbour advertisement.
var errNotAdvertisement = errors.New("not an IPv6 neighbour advertisement")

// Advertisement is a neighbour advertisement as read off the wire, in the
// shape of an ARP reply (the responder's MAC and the probed IP are the
// sender's, the IPv6 destination and Ethernet destination are the
// target's), plus its solicited flag.
type Advertisement struct {
	Reply
	// Solicited is the S flag: the advertisement answers a solicitation.
	Solicited bool
}

// SolicitedNode returns the solicited-node multicast address of ip
// (ff02::1:ffXX:XXXX with the address's low 24 bits, RFC 4291 §2.7.1) and the
// Ethernet multicast address it maps to (33:33 and its low 32 bits, RFC 2464
// §7).
func SolicitedNode(ip netip.Addr) (netip.Addr, net.HardwareAddr) {
	a := ip.As16()
	grp := [16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]}
	return netip.AddrFrom16(grp), net.HardwareAddr{0x33, 0x33, grp[12], grp[13], grp[14], grp[15]}
}

// BuildSolicitation returns an Ethernet frame carrying an ICMPv6 neighbour
// solicitation from srcMAC/srcIP for target, sent to target's solicited-node
// multicast address as the kernel sends it (hop limit 255, the source
// link-layer address option, the ICMPv6 checksum). srcIP may be the
// unspecified address :: (as in duplicate address detection); the message
// then carries no source link-layer option and answers come to ff02::1.
func BuildSolicitation(srcMAC net.HardwareAddr, srcIP, target netip.Addr) ([]byte, error) {
	if len(srcMAC) != 6 {
		return nil, fmt.Errorf("building neighbour solicitation: source MAC %q is not a 6-byte Ethernet address", srcMAC)
	}
	if !srcIP.Is6() || srcIP.Is4In6() || !target.Is6() || target.Is4In6() || target.IsMulticast() || target.IsUnspecified() {
		return nil, fmt.Errorf("building neighbour solicitation for %s from %s: only IPv6 unicast addresses are solicited", target, srcIP)
	}
	group, groupMAC := SolicitedNode(target)
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: groupMAC, EthernetType: layers.EthernetTypeIPv6}
	ip6 := &layers.IPv6{
		Version:    6,
		NextHeader: layers.IPProtocolICMPv6,
		HopLimit:   ndpHopLimit,
		SrcIP:      srcIP.AsSlice(),
		DstIP:      group.AsSlice(),
	}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		return nil, fmt.Errorf("building neighbour solicitation for %s: %w", target, err)
	}
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice()}
	if !srcIP.IsUnspecified() {
		ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: srcMAC}}
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip6, icmp, ns); err != nil {
		return nil, fmt.Errorf("serialising neighbour solicitation for %s: %w", target, err)
	}
	return buf.Bytes(), nil
}

// ParseAdvertisement decodes an Ethernet frame and returns the neighbour
// advertisement it carries. Anything else is an error: short or malformed
// frames, other EtherTypes or IPv6 next headers (an advertisement carries no
// extension headers), a hop limit other than 255, other ICMPv6 messages, a
// non-zero code, a bad checksum, a multicast target or malformed options.
// The responder's MAC is the target link-layer address option (what a
// neighbour cache would store), else the Ethernet source. The returned
// slices are copies.
func ParseAdvertisement(frame []byte) (Advertisement, error) {
	eth, err := decodeEthernet(frame, layers.EthernetTypeIPv6, errNotAdvertisement)
	if err != nil {
		return Advertisement{}, err
	}
	var ip6 layers.IPv6
	if err := ip6.DecodeFromBytes(eth.Payload, gopacket.NilDecodeFeedback); err != nil {
		return Advertisement{}, fmt.Errorf("decoding IPv6 header: %w", err)
	}
	if ip6.NextHeader != layers.IPProtocolICMPv6 {
		return Advertisement{}, fmt.Errorf("IPv6 next header %d: %w", ip6.NextHeader, errNotAdvertisement)
	}
	if ip6.HopLimit != ndpHopLimit {
		return Advertisement{}, fmt.Errorf("hop limit %d, not 255: %w", ip6.HopLimit, errNotAdvertisement)
	}
	var icmp layers.ICMPv6
	if err := icmp.DecodeFromBytes(ip6.Payload, gopacket.NilDecodeFeedback); err != nil {
		return Advertisement{}, fmt.Errorf("decoding ICMPv6: %w", err)
	}
	if icmp.TypeCode != layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0) {
		return Advertisement{}, fmt.Errorf("ICMPv6 %s: %w", icmp.TypeCode, errNotAdvertisement)
	}
	if err := icmp.SetNetworkLayerForChecksum(&ip6); err != nil {
		return Advertisement{}, fmt.Errorf("checking ICMPv6 checksum: %w", err)
	}
	if err, sum := icmp.VerifyChecksum(); err != nil || !sum.Valid {
		return Advertisement{}, fmt.Errorf("ICMPv6 checksum %#04x, want %#04x", sum.Actual, sum.Correct)
	}
	var na layers.ICMPv6NeighborAdvertisement
	if err := na.DecodeFromBytes(icmp.Payload, gopacket.NilDecodeFeedback); err != nil {
		return Advertisement{}, fmt.Errorf("decoding neighbour advertisement: %w", err)
	}
	target, _ := netip.AddrFromSlice(na.TargetAddress)
	if target.IsMulticast() {
		return Advertisement{}, fmt.Errorf("multicast target %s: %w", target, errNotAdvertisement)
	}
	sender := eth.SrcMAC
	for _, o := range na.Options {
		if o.Type != layers.ICMPv6OptTargetAddress {
			continue
		}
		if len(o.Data) != 6 {
			return Advertisement{}, fmt.Errorf("target link-layer address option of %d bytes: %w", len(o.Data), errNotAdvertisement)
		}
		sender = o.Data
	}
	dst, _ := netip.AddrFromSlice(ip6.DstIP)
	return Advertisement{
		Reply: Reply{
			SenderMAC: append(net.HardwareAddr(nil), sender...),
			SenderIP:  target,
			TargetMAC: append(net.HardwareAddr(nil), eth.DstMAC...),
			TargetIP:  dst,
		},
		Solicited: na.Solicited(),
	}, nil
}

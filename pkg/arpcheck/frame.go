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

// minFrameLen is the minimum Ethernet frame length without the FCS; requests
// are padded to it as a NIC would.
const minFrameLen = 60

// ethernetBroadcast is the destination of every ARP request.
var ethernetBroadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// errNotReply is returned by ParseReply for a well-formed ARP frame that is
// not an IPv4-over-Ethernet reply (a request, or another protocol).
var errNotReply = errors.New("not an IPv4 ARP reply")

// Reply is an ARP reply as read off the wire.
type Reply struct {
	// SenderMAC is the hardware address the responder claims for SenderIP.
	SenderMAC net.HardwareAddr
	// SenderIP is the address the reply is about (the probed IP).
	SenderIP netip.Addr
	// TargetMAC is the hardware address the reply is sent to.
	TargetMAC net.HardwareAddr
	// TargetIP is the protocol address of the requester.
	TargetIP netip.Addr
}

// BuildRequest returns a broadcast Ethernet frame carrying an ARP request
// from srcMAC/srcIP asking who has target. srcIP may be the unspecified
// address 0.0.0.0 (an ARP probe, RFC 5227). Construction is separate from
// sending so that frames can be checked byte for byte.
func BuildRequest(srcMAC net.HardwareAddr, srcIP, target netip.Addr) ([]byte, error) {
	if len(srcMAC) != 6 {
		return nil, fmt.Errorf("building ARP request: source MAC %q is not a 6-byte Ethernet address", srcMAC)
	}
	if !srcIP.Is4() || !target.Is4() {
		return nil, fmt.Errorf("building ARP request for %s from %s: only IPv4 addresses are probed", target, srcIP)
	}
	src4, tgt4 := srcIP.As4(), target.As4()
	eth := &layers.Ethernet{
		SrcMAC:       srcMAC,
		DstMAC:       ethernetBroadcast,
		EthernetType: layers.EthernetTypeARP,
	}
	arp := &layers.ARP{
		AddrType:          layers.LinkTypeEthernet,
		Protocol:          layers.EthernetTypeIPv4,
		HwAddressSize:     6,
		ProtAddressSize:   4,
		Operation:         layers.ARPRequest,
		SourceHwAddress:   srcMAC,
		SourceProtAddress: src4[:],
		DstHwAddress:      make([]byte, 6),
		DstProtAddress:    tgt4[:],
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, arp); err != nil {
		return nil, fmt.Errorf("serialising ARP request for %s: %w", target, err)
	}
	frame := buf.Bytes()
	if len(frame) < minFrameLen {
		frame = append(frame, make([]byte, minFrameLen-len(frame))...)
	}
	return frame, nil
}

// ParseReply decodes an Ethernet frame and returns the IPv4 ARP reply it
// carries. Anything else (short or malformed frames, other EtherTypes, ARP
// requests, other hardware or protocol types) is an error; the prober drops
// such frames without counting them. The returned slices are copies.
func ParseReply(frame []byte) (Reply, error) {
	eth, err := decodeEthernet(frame, layers.EthernetTypeARP, errNotReply)
	if err != nil {
		return Reply{}, err
	}
	var arp layers.ARP
	if err := arp.DecodeFromBytes(eth.Payload, gopacket.NilDecodeFeedback); err != nil {
		return Reply{}, fmt.Errorf("decoding ARP: %w", err)
	}
	if arp.AddrType != layers.LinkTypeEthernet || arp.Protocol != layers.EthernetTypeIPv4 ||
		arp.HwAddressSize != 6 || arp.ProtAddressSize != 4 {
		return Reply{}, fmt.Errorf("ARP hardware type %d (%d bytes), protocol %#04x (%d bytes): %w",
			arp.AddrType, arp.HwAddressSize, uint16(arp.Protocol), arp.ProtAddressSize, errNotReply)
	}
	if arp.Operation != layers.ARPReply {
		return Reply{}, fmt.Errorf("ARP operation %d: %w", arp.Operation, errNotReply)
	}
	sip, _ := netip.AddrFromSlice(arp.SourceProtAddress)
	tip, _ := netip.AddrFromSlice(arp.DstProtAddress)
	return Reply{
		SenderMAC: append(net.HardwareAddr(nil), arp.SourceHwAddress...),
		SenderIP:  sip,
		TargetMAC: append(net.HardwareAddr(nil), arp.DstHwAddress...),
		TargetIP:  tip,
	}, nil
}

// decodeEthernet decodes a frame's Ethernet header and refuses any EtherType
// but want, wrapping notWanted so callers can tell "not for us" from "broken".
func decodeEthernet(frame []byte, want layers.EthernetType, notWanted error) (layers.Ethernet, error) {
	var eth layers.Ethernet
	if err := eth.DecodeFromBytes(frame, gopacket.NilDecodeFeedback); err != nil {
		return eth, fmt.Errorf("decoding Ethernet header: %w", err)
	}
	if eth.EthernetType != want {
		return eth, fmt.Errorf("EtherType %#04x: %w", uint16(eth.EthernetType), notWanted)
	}
	return eth, nil
}

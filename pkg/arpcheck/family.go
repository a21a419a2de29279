// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"net"
	"net/netip"
)

// Family is an IP family as findings and metrics name it.
type Family string

// The families a LoadBalancer IP can have.
const (
	// FamilyIPv4 addresses are probed with ARP.
	FamilyIPv4 Family = "ipv4"
	// FamilyIPv6 addresses are probed with neighbour discovery (NDP).
	FamilyIPv6 Family = "ipv6"
)

// FamilyOf returns ip's family (IPv4-mapped IPv6 addresses are IPv4).
func FamilyOf(ip netip.Addr) Family {
	if ip.Unmap().Is4() {
		return FamilyIPv4
	}
	return FamilyIPv6
}

// Protocol names how the family's addresses are resolved: ARP or NDP.
func (f Family) Protocol() string {
	if f == FamilyIPv6 {
		return "NDP"
	}
	return "ARP"
}

// buildProbe returns the request for target in its family: an ARP request or
// a neighbour solicitation, from mac/src.
func buildProbe(mac net.HardwareAddr, src, target netip.Addr) ([]byte, error) {
	if target.Is4() {
		return BuildRequest(mac, src, target)
	}
	return BuildSolicitation(mac, src, target)
}

// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"

	mobyipvs "github.com/moby/ipvs"
)

// fromMobyService converts a moby/ipvs service into a VirtualServer.
func fromMobyService(s *mobyipvs.Service) (VirtualServer, error) {
	if s == nil {
		return VirtualServer{}, fmt.Errorf("converting IPVS service: nil service")
	}
	v := VirtualServer{
		Protocol:  Protocol(s.Protocol),
		Port:      s.Port,
		FWMark:    s.FWMark,
		Scheduler: s.SchedName,
		Flags:     ServiceFlags(s.Flags),
		Timeout:   s.Timeout,
		Netmask:   s.Netmask,
		PEName:    s.PEName,
	}
	addr, err := addrFromIP(s.Address, s.AddressFamily)
	if err != nil {
		if s.FWMark == 0 {
			return VirtualServer{}, fmt.Errorf("converting IPVS service %s:%d: %w", s.Address, s.Port, err)
		}
		addr = netip.Addr{}
	}
	v.Address = addr
	return v, nil
}

// fromMobyDestination converts a moby/ipvs destination into a RealServer.
func fromMobyDestination(d *mobyipvs.Destination) (RealServer, error) {
	if d == nil {
		return RealServer{}, fmt.Errorf("converting IPVS destination: nil destination")
	}
	addr, err := addrFromIP(d.Address, d.AddressFamily)
	if err != nil {
		return RealServer{}, fmt.Errorf("converting IPVS destination %s:%d: %w", d.Address, d.Port, err)
	}
	return RealServer{
		Address:      addr,
		Port:         d.Port,
		Weight:       d.Weight,
		Forward:      ForwardMethod(d.ConnectionFlags & mobyipvs.ConnectionFlagFwdMask),
		ActiveConn:   d.ActiveConnections,
		InactiveConn: d.InactiveConnections,
	}, nil
}

// addrFromIP converts a netlink address of the given family.
func addrFromIP(ip net.IP, family uint16) (netip.Addr, error) {
	switch family {
	case syscall.AF_INET:
		if v4 := ip.To4(); v4 != nil {
			return netip.AddrFrom4([4]byte(v4)), nil
		}
	case syscall.AF_INET6:
		if len(ip) == net.IPv6len {
			return netip.AddrFrom16([16]byte(ip)), nil
		}
	default:
		return netip.Addr{}, fmt.Errorf("unknown address family %d", family)
	}
	return netip.Addr{}, fmt.Errorf("address %v does not match family %d", []byte(ip), family)
}

// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
)

// ErrUnprobeable wraps the refusal of a probe target no host can answer
// for: an address of this node, a subnet's network or broadcast address, or
// an address that is not unicast (unspecified, loopback, multicast, the
// IPv4 broadcast).
var ErrUnprobeable = errors.New("no host answers address resolution for it")

// ErrNoInterface: the interface named to probe on does not exist.
var ErrNoInterface = errors.New("no such interface")

// LocalInterfaces maps each interface's name to its addresses, each with
// the prefix of its subnet (e.g. 192.0.2.10/24).
type LocalInterfaces map[string][]netip.Prefix

// HostInterfaces returns this network namespace's interfaces and addresses.
func HostInterfaces() (LocalInterfaces, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	out := LocalInterfaces{}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", ifi.Name, err)
		}
		out[ifi.Name] = nil
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			ones, _ := n.Mask.Size()
			out[ifi.Name] = append(out[ifi.Name], netip.PrefixFrom(ip.Unmap(), ones))
		}
	}
	return out, nil
}

// limitedBroadcast is IPv4's all-ones broadcast address.
var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// checkUnicast refuses an address that names no single host on a link:
// ARP and neighbour discovery resolve unicast addresses only (RFC 826,
// RFC 4861 §7.2.2), so a probe of one would only time out and be reported
// as a silent IP (or, for loopback, never leave the node).
func checkUnicast(ip netip.Addr) error {
	var what string
	switch {
	case ip.IsUnspecified():
		what = "the unspecified address"
	case ip.Is4() && ip.As4()[0] == 0:
		// 0.0.0.0/8, "this network" (RFC 1122 3.2.1.3): a source only,
		// never a destination on the wire.
		what = "in 0.0.0.0/8 (this network: a source address only)"
	case ip.IsLoopback():
		what = "a loopback address"
	case ip == limitedBroadcast:
		what = "the IPv4 broadcast address"
	case ip.IsMulticast():
		what = "a multicast address"
	default:
		return nil
	}
	return fmt.Errorf("probe IP %s is %s: %w", ip, what, ErrUnprobeable)
}

// CheckTargets refuses, before any probe, what a probe cannot answer:
// iface (when not empty) missing from local, and each target that is an
// address of a local interface, or the network or (IPv4) broadcast address
// of a local subnet (prefixes shorter than /31 for IPv4, /127 for IPv6).
// Such a probe would only ever time out and be reported as a silent IP.
// It works for both address families.
func CheckTargets(targets []Target, iface string, local LocalInterfaces) error {
	if iface != "" {
		if _, ok := local[iface]; !ok {
			names := make([]string, 0, len(local))
			for n := range local {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("--interface %q: %w (interfaces: %s)", iface, ErrNoInterface, strings.Join(names, ", "))
		}
	}
	var errs []error
	for _, t := range targets {
		if err := checkTarget(t.IP, local); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkTarget(ip netip.Addr, local LocalInterfaces) error {
	ip = ip.Unmap()
	names := make([]string, 0, len(local))
	for n := range local {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, p := range local[name] {
			if p.Addr() == ip {
				return fmt.Errorf("probe IP %s is an address of this node (%s): %w", ip, name, ErrUnprobeable)
			}
			if p.Addr().BitLen() != ip.BitLen() || !p.Masked().Contains(ip) {
				continue
			}
			if p.Bits() >= p.Addr().BitLen()-1 {
				continue // /31, /32, /127, /128: every address is a host
			}
			if ip == p.Masked().Addr() {
				return fmt.Errorf("probe IP %s is the network address of %s on %s: %w", ip, p.Masked(), name, ErrUnprobeable)
			}
			if ip.Is4() && ip == broadcast(p) {
				return fmt.Errorf("probe IP %s is the broadcast address of %s on %s: %w", ip, p.Masked(), name, ErrUnprobeable)
			}
		}
	}
	return nil
}

// broadcast returns the last address of an IPv4 prefix.
func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	for i := 3; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	return netip.AddrFrom4(b)
}

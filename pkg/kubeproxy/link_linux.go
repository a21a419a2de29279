// SPDX-License-Identifier: Apache-2.0

//go:build linux

package kubeproxy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// ReadLink reads the interface name and its addresses through netlink
// (RTM_GETLINK/RTM_GETADDR dumps; nothing is requested that could load a module).
func ReadLink(name string) (Link, error) {
	l := Link{Name: name}
	link, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return l, nil
		}
		return l, fmt.Errorf("looking up interface %s: %w", name, err)
	}
	l.Exists = true
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return l, fmt.Errorf("listing addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			l.Addrs = append(l.Addrs, ip.Unmap())
		}
	}
	return l, nil
}

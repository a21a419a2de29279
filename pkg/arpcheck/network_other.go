// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package arpcheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// Route implements Network; it is not supported on this platform.
func (HostNetwork) Route(_ context.Context, ip netip.Addr, _ string) (Route, error) {
	return Route{}, fmt.Errorf("looking up the route to %s: %w", ip, ErrNotSupported)
}

// Listen implements Network; it is not supported on this platform.
func (HostNetwork) Listen(_ context.Context, r Route) (Socket, net.Addr, error) {
	return nil, nil, fmt.Errorf("opening an ARP socket on %s: %w", r.Interface, ErrNotSupported)
}

// Routes implements BatchRouter; it is not supported on this platform.
func (h HostNetwork) Routes(ctx context.Context, targets []Target) ([]Route, []error) {
	routes := make([]Route, len(targets))
	errs := make([]error, len(targets))
	for i, t := range targets {
		routes[i], errs[i] = h.Route(ctx, t.IP, t.Interface)
	}
	return routes, errs
}

// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"context"
	"errors"
	"net"
	"net/netip"
)

// ErrNotSupported is returned where ARP and NDP probing are not implemented
// (every platform but Linux).
var ErrNotSupported = errors.New("ARP and NDP probing are only supported on Linux")

// ErrNotOnLink is returned by a route lookup when the address is reached
// through a gateway: it is not on a directly connected segment, so ARP or NDP
// cannot tell who holds it.
var ErrNotOnLink = errors.New("address is not on a directly connected network")

// Route is where ARP requests or neighbour solicitations for an address go out: the egress interface
// and the source address a route lookup chose.
type Route struct {
	// Interface is the egress interface's name.
	Interface string
	// Index is its interface index.
	Index int
	// MAC is its hardware address (the requests' sender).
	MAC net.HardwareAddr
	// Src is the requests' sender IP, in the probed address's family: for
	// IPv4 0.0.0.0 when the interface has none (an ARP probe); for IPv6
	// preferably the link-local address.
	Src netip.Addr
}

// Socket is a link-layer socket bound to one interface.
type Socket interface {
	PacketConn
	// Close releases the socket.
	Close() error
}

// Network is what the checker needs from the host: a route lookup and a
// socket per interface. HostNetwork is the real one.
type Network interface {
	// Route returns where requests for ip go out. iface, when not empty,
	// forces the egress interface. It returns ErrNotOnLink when ip is only
	// reachable through a gateway and no interface was forced.
	Route(ctx context.Context, ip netip.Addr, iface string) (Route, error)
	// Listen opens a socket on r's interface for r's family (ARP for an IPv4
	// source, NDP for an IPv6 one) and returns it with the link-layer
	// address to write requests to.
	Listen(ctx context.Context, r Route) (Socket, net.Addr, error)
}

// BatchRouter is implemented by a Network that looks up many routes at
// once more cheaply than one by one (HostNetwork: over one netlink
// connection). Routes returns, per target, what Route(ctx, t.IP,
// t.Interface) would.
type BatchRouter interface {
	Routes(ctx context.Context, targets []Target) ([]Route, []error)
}

// HostNetwork is the host's network: netlink route lookups and AF_PACKET
// sockets. With NetNSPath empty it is the network namespace of the calling
// thread; otherwise the named one (e.g. /var/run/netns/x), whose sockets are
// opened from a dedicated OS thread so the caller's thread is never moved.
type HostNetwork struct {
	// NetNSPath is the network namespace to work in; empty for the current one.
	NetNSPath string
}

var (
	_ Network     = HostNetwork{}
	_ BatchRouter = HostNetwork{}
)

// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ErrModuleNotLoaded is returned by [Interface.Table] when the ip_vs kernel
// module is not loaded: the table cannot exist, and an empty answer would be
// a lie.
var ErrModuleNotLoaded = errors.New("ip_vs kernel module not loaded")

// ErrNotSupported is returned on platforms without IPVS.
var ErrNotSupported = errors.New("IPVS is not supported on this platform")

// Interface reads the IPVS table. It is read-only by design.
type Interface interface {
	// Table returns every virtual server with its real servers, in the
	// kernel's order (the order `ipvsadm -Ln` prints). It returns an error
	// wrapping ErrModuleNotLoaded when ip_vs is not loaded.
	Table(ctx context.Context) (Table, error)
}

// Timeouts are IPVS's connection timeouts (`ipvsadm -L --timeout`).
type Timeouts struct {
	// TCP is the idle timeout of an established TCP connection entry.
	TCP time.Duration
	// TCPFin is the timeout of a TCP entry after a FIN.
	TCPFin time.Duration
	// UDP is the timeout of a UDP entry.
	UDP time.Duration
}

// TimeoutReader reads IPVS's connection timeouts. It returns an error
// wrapping ErrModuleNotLoaded when ip_vs is not loaded.
type TimeoutReader interface {
	// Timeouts returns the current timeouts.
	Timeouts(ctx context.Context) (Timeouts, error)
}

// Protocol is an IP protocol number of a virtual server.
type Protocol uint16

// Protocols IPVS balances.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

// String returns the protocol's name as ipvsadm prints it.
func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	default:
		return "proto-" + strconv.Itoa(int(p))
	}
}

// ParseProtocol parses "TCP", "UDP" or "SCTP" (any case).
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToUpper(s) {
	case "TCP":
		return TCP, nil
	case "UDP":
		return UDP, nil
	case "SCTP":
		return SCTP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// ServiceFlags are a virtual server's IP_VS_SVC_F_* flags.
type ServiceFlags uint32

// Virtual server flags (include/uapi/linux/ip_vs.h).
const (
	FlagPersistent ServiceFlags = 0x0001
	FlagHashed     ServiceFlags = 0x0002
	FlagOnePacket  ServiceFlags = 0x0004
	FlagSched1     ServiceFlags = 0x0008
	FlagSched2     ServiceFlags = 0x0010
	FlagSched3     ServiceFlags = 0x0020
)

// ForwardMethod is how a real server receives packets (IP_VS_CONN_F_FWD_MASK).
type ForwardMethod uint32

// Forwarding methods.
const (
	Masquerade  ForwardMethod = 0
	LocalNode   ForwardMethod = 1
	Tunnel      ForwardMethod = 2
	DirectRoute ForwardMethod = 3
	Bypass      ForwardMethod = 4
)

// String returns the method's name as ipvsadm prints it.
func (f ForwardMethod) String() string {
	switch f {
	case Masquerade:
		return "Masq"
	case LocalNode:
		return "Local"
	case Tunnel:
		return "Tunnel"
	case DirectRoute:
		return "Route"
	case Bypass:
		return "Bypass"
	default:
		return "Unknown"
	}
}

// Key identifies a virtual server: address, protocol and port, or a
// firewall mark.
type Key struct {
	// Address is the virtual IP (invalid for a firewall-mark service).
	Address netip.Addr
	// Protocol is the IP protocol.
	Protocol Protocol
	// Port is the virtual port.
	Port uint16
	// FWMark is the firewall mark (0 for address services).
	FWMark uint32
}

// String renders the key as "10.96.0.1:443/TCP" or "fwmark 7".
func (k Key) String() string {
	if k.FWMark != 0 {
		return "fwmark " + strconv.FormatUint(uint64(k.FWMark), 10)
	}
	return netip.AddrPortFrom(k.Address, k.Port).String() + "/" + k.Protocol.String()
}

// VirtualServer is one IPVS virtual service.
type VirtualServer struct {
	// Address is the virtual IP (invalid for a firewall-mark service).
	Address netip.Addr
	// Protocol is the IP protocol.
	Protocol Protocol
	// Port is the virtual port.
	Port uint16
	// FWMark is the firewall mark (0 for address services).
	FWMark uint32
	// Scheduler is the scheduler's name ("rr", "lc", …).
	Scheduler string
	// Flags are the IP_VS_SVC_F_* flags as the kernel reports them.
	Flags ServiceFlags
	// Timeout is the persistence timeout in seconds.
	Timeout uint32
	// Netmask is the persistence netmask (an IPv4 mask in network order, or
	// a prefix length for IPv6).
	Netmask uint32
	// PEName is the persistence engine's name, if any.
	PEName string
}

// Key returns the virtual server's identity.
func (v VirtualServer) Key() Key {
	return Key{Address: v.Address, Protocol: v.Protocol, Port: v.Port, FWMark: v.FWMark}
}

// Equal reports whether v and o are the same virtual server with the same
// settings. The kernel-internal FlagHashed is ignored.
func (v VirtualServer) Equal(o VirtualServer) bool {
	return v.Key() == o.Key() && v.Scheduler == o.Scheduler &&
		v.Flags&^FlagHashed == o.Flags&^FlagHashed && v.Timeout == o.Timeout &&
		v.Netmask == o.Netmask && v.PEName == o.PEName
}

// String renders the virtual server as "10.96.0.1:443/TCP".
func (v VirtualServer) String() string { return v.Key().String() }

// RealServer is one destination of a virtual server.
type RealServer struct {
	// Address is the real server's IP.
	Address netip.Addr
	// Port is the real server's port.
	Port uint16
	// Weight is the scheduling weight.
	Weight int
	// Forward is the forwarding method.
	Forward ForwardMethod
	// ActiveConn is the number of active connections.
	ActiveConn int
	// InactiveConn is the number of inactive connections.
	InactiveConn int
}

// Equal reports whether r and o are the same destination (address and port;
// counters and weight are state, not identity).
func (r RealServer) Equal(o RealServer) bool {
	return r.Address == o.Address && r.Port == o.Port
}

// String renders the real server as "10.244.1.11:8080".
func (r RealServer) String() string {
	return netip.AddrPortFrom(r.Address, r.Port).String()
}

// Entry is a virtual server with its real servers.
type Entry struct {
	// Virtual is the virtual server.
	Virtual VirtualServer
	// Real are its real servers, in the kernel's order.
	Real []RealServer
}

// Table is the IPVS table, in the kernel's order.
type Table []Entry

// Index returns the entries by key.
func (t Table) Index() map[Key]Entry {
	m := make(map[Key]Entry, len(t))
	for _, e := range t {
		m[e.Virtual.Key()] = e
	}
	return m
}

// RealServerCount returns the total number of real servers.
func (t Table) RealServerCount() int {
	n := 0
	for _, e := range t {
		n += len(e.Real)
	}
	return n
}

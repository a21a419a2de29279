// SPDX-License-Identifier: Apache-2.0

// Package l2segment builds a layer-2 segment on this host for tests, the
// demo and benchmarks: a Linux bridge in the host's network namespace that
// carries an address of its own (so processes on the host, such as the API
// server and Prometheus, are reachable from the nodes), and "nodes", each a
// network namespace plugged into the bridge with a veth called eth0.
//
// Each node also has a kube-ipvs0 that stands in for kube-proxy's dummy
// device: the host kernel has no dummy driver, so it is an ifb device, which
// is NOARP like a dummy and, like kube-ipvs0, stays down. Addresses on a
// down device still get their local routes, so the node's kernel answers
// ARP for them on eth0 exactly when a dummy's would: with arp_ignore=0 it
// does, with strictARP's arp_ignore=1 (reply only for addresses of the
// receiving interface) it does not.
//
// Everything is driven through iproute2 (`ip`), and every name carries a
// random prefix so parallel runs never clash. Close deletes it all.
package l2segment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"sync"
)

// Segment is a bridge with nodes plugged in.
type Segment struct {
	// Prefix starts every namespace and link name this segment creates.
	Prefix string
	// Bridge is the bridge's name in the host's namespace.
	Bridge string
	// Subnet is the segment's IPv4 /24.
	Subnet netip.Prefix
	// HostIP is the bridge's own address (the first in Subnet).
	HostIP netip.Addr

	mu    sync.Mutex
	nodes []*Node
	taps  []string
	next  netip.Addr
}

// Node is a network namespace on the segment.
type Node struct {
	// Name is the node's short name (also its Kubernetes Node name).
	Name string
	// NetNS is the namespace's name (ip netns).
	NetNS string
	// IP is eth0's address.
	IP netip.Addr
	// MAC is eth0's MAC address.
	MAC string

	seg  *Segment
	port string
}

// New creates the bridge on a random 10.231.x.0/24.
func New(ctx context.Context) (*Segment, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(b)
	s := &Segment{Prefix: "l2" + id + "-", Bridge: "l2" + id}
	s.Subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, b[0], 0}), 24)
	s.HostIP = s.Subnet.Addr().Next()
	s.next = s.HostIP.Next()
	if err := run(ctx, "ip", "link", "add", s.Bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"ip", "addr", "add", netip.PrefixFrom(s.HostIP, 24).String(), "dev", s.Bridge},
		{"ip", "link", "set", s.Bridge, "up"},
	} {
		if err := run(ctx, args...); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// NextIP reserves the next free address of the subnet (for a node or a
// foreign host's claimed address alike).
func (s *Segment) NextIP() netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip := s.next
	s.next = s.next.Next()
	return ip
}

// AddNode creates a namespace plugged into the bridge, with eth0 on the next
// free address (default route via the host), lo up, an empty kube-ipvs0,
// and strictARP's sysctls (arp_ignore=1, arp_announce=2 on all).
func (s *Segment) AddNode(ctx context.Context, name string) (*Node, error) {
	s.mu.Lock()
	port := fmt.Sprintf("%sv%d", strings.TrimSuffix(s.Prefix, "-"), len(s.nodes))
	s.mu.Unlock()
	n := &Node{Name: name, NetNS: s.Prefix + name, IP: s.NextIP(), seg: s, port: port}
	if err := run(ctx, "ip", "netns", "add", n.NetNS); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.nodes = append(s.nodes, n)
	s.mu.Unlock()
	steps := [][]string{
		{"ip", "-n", n.NetNS, "link", "set", "lo", "up"},
		{"ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n.NetNS},
		{"ip", "link", "set", port, "master", s.Bridge, "up"},
		{"ip", "-n", n.NetNS, "addr", "add", netip.PrefixFrom(n.IP, 24).String(), "dev", "eth0"},
		{"ip", "-n", n.NetNS, "link", "set", "eth0", "up"},
		{"ip", "-n", n.NetNS, "route", "add", "default", "via", s.HostIP.String()},
		{"ip", "-n", n.NetNS, "link", "add", "kube-ipvs0", "type", "ifb"},
	}
	for _, args := range steps {
		if err := run(ctx, args...); err != nil {
			return nil, err
		}
	}
	if err := n.SetStrictARP(ctx, true); err != nil {
		return nil, err
	}
	mac, err := n.LinkMAC(ctx, "eth0")
	if err != nil {
		return nil, err
	}
	n.MAC = mac
	return n, nil
}

// Close deletes every node namespace (their veths go with them) and the bridge.
func (s *Segment) Close() {
	s.mu.Lock()
	nodes := s.nodes
	s.nodes = nil
	s.mu.Unlock()
	ctx := context.Background()
	for _, n := range nodes {
		_ = run(ctx, "ip", "netns", "del", n.NetNS)
	}
	s.mu.Lock()
	taps := s.taps
	s.taps = nil
	s.mu.Unlock()
	for _, tap := range taps {
		_ = run(ctx, "ip", "link", "del", tap)
	}
	_ = run(ctx, "ip", "link", "del", s.Bridge)
}

// Tap is a host tap device plugged into the bridge, for a virtual machine
// that joins the segment (internal/guestvm's Machine.Taps): the machine's
// NIC takes MAC and, configured inside the machine, IP.
type Tap struct {
	// Name is the machine's short name (also its Kubernetes Node name).
	Name string
	// Ifname is the tap device in the host's namespace.
	Ifname string
	// IP is the address reserved for the machine's NIC.
	IP netip.Addr
	// MAC is the address the machine's NIC must take (locally
	// administered, random).
	MAC string
}

// AddTap creates a tap device enslaved to the bridge and reserves the next
// free address and a random MAC for the machine that opens it. Close
// deletes it.
func (s *Segment) AddTap(ctx context.Context, name string) (*Tap, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	// 52:54:00 is QEMU's prefix; the locally administered bit is set in
	// the first octet either way, so it never collides with a real NIC.
	tap := &Tap{Name: name, Ifname: s.Prefix + "t" + name, IP: s.NextIP(),
		MAC: fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])}
	if len(tap.Ifname) > 15 {
		return nil, fmt.Errorf("tap name %q longer than IFNAMSIZ", tap.Ifname)
	}
	if err := run(ctx, "ip", "tuntap", "add", "dev", tap.Ifname, "mode", "tap"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.taps = append(s.taps, tap.Ifname)
	s.mu.Unlock()
	if err := run(ctx, "ip", "link", "set", tap.Ifname, "master", s.Bridge, "up"); err != nil {
		return nil, err
	}
	return tap, nil
}

// Command returns a command that runs inside the node's namespace.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NetNS, name}, args...)...)
}

// Run runs a command inside the node's namespace and returns its output.
func (n *Node) Run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.NetNS, err, out)
	}
	return string(out), nil
}

// SetStrictARP sets net.ipv4.conf.all.arp_ignore/arp_announce to what
// kube-proxy's strictARP writes (1/2), or back to the kernel defaults (0/0).
func (n *Node) SetStrictARP(ctx context.Context, on bool) error {
	ignore, announce := "0", "0"
	if on {
		ignore, announce = "1", "2"
	}
	_, err := n.Run(ctx, "sysctl", "-q", "-w", "net.ipv4.conf.all.arp_ignore="+ignore, "net.ipv4.conf.all.arp_announce="+announce)
	return err
}

// AddVIP puts ip/32 on kube-ipvs0, as kube-proxy does for every LoadBalancer IP.
func (n *Node) AddVIP(ctx context.Context, ip netip.Addr) error {
	return run(ctx, "ip", "-n", n.NetNS, "addr", "replace", netip.PrefixFrom(ip, 32).String(), "dev", "kube-ipvs0")
}

// DelVIP removes ip/32 from kube-ipvs0.
func (n *Node) DelVIP(ctx context.Context, ip netip.Addr) error {
	return run(ctx, "ip", "-n", n.NetNS, "addr", "del", netip.PrefixFrom(ip, 32).String(), "dev", "kube-ipvs0")
}

// AddAddress puts ip/24 on eth0 as a second address: a host that holds the
// address itself and answers ARP for it from its kernel.
func (n *Node) AddAddress(ctx context.Context, ip netip.Addr) error {
	return run(ctx, "ip", "-n", n.NetNS, "addr", "add", netip.PrefixFrom(ip, 24).String(), "dev", "eth0")
}

// DelAddress removes an address added with AddAddress.
func (n *Node) DelAddress(ctx context.Context, ip netip.Addr) error {
	return run(ctx, "ip", "-n", n.NetNS, "addr", "del", netip.PrefixFrom(ip, 24).String(), "dev", "eth0")
}

var linkEther = regexp.MustCompile(`link/ether ([0-9a-f:]{17})`)

// LinkMAC returns the MAC address of one of the node's links.
func (n *Node) LinkMAC(ctx context.Context, link string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", n.NetNS, "-o", "link", "show", link).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip link show %s in %s: %w: %s", link, n.NetNS, err, out)
	}
	m := linkEther.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no MAC for %s in %s: %s", link, n.NetNS, out)
	}
	return string(m[1]), nil
}

func run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ErrNoTools is returned by Check when ip or arping is missing.
var ErrNoTools = errors.New("iproute2 (ip) and iputils arping are needed (hack/metallb/install.sh installs them)")

// Check reports whether the tools the segment needs are installed.
func Check() error {
	for _, tool := range []string{"ip", "arping"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNoTools, tool, err)
		}
	}
	return nil
}

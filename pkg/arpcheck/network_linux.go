// SPDX-License-Identifier: Apache-2.0

//go:build linux

package arpcheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// recvBuffer is the socket receive buffer asked for, so a burst of replies
// to many in-flight requests is not dropped.
const recvBuffer = 4 << 20

// handle opens a netlink handle in the configured namespace.
func (h HostNetwork) handle() (*netlink.Handle, error) {
	if h.NetNSPath == "" {
		nh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("opening netlink: %w", err)
		}
		return nh, nil
	}
	ns, err := netns.GetFromPath(h.NetNSPath)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", h.NetNSPath, err)
	}
	defer ns.Close()
	nh, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening netlink in %s: %w", h.NetNSPath, err)
	}
	return nh, nil
}

// Route implements Network. It asks the kernel (RTM_GETROUTE, as
// `ip route get`). When the answer is a local route — on an IPVS node every
// LoadBalancer IP sits on kube-ipvs0, so the node itself "holds" it — the
// main table's longest match says which segment the address lives on.
func (h HostNetwork) Route(_ context.Context, ip netip.Addr, iface string) (Route, error) {
	nh, err := h.handle()
	if err != nil {
		return Route{}, err
	}
	defer nh.Close()
	return newRouteCache(nh).route(ip, iface)
}

// Routes implements BatchRouter: Route for every target over one netlink
// connection (opening one per lookup, in another network namespace, costs
// more than the lookup itself), reading the main table, each link and each
// link's addresses once for the whole batch: on an IPVS node every
// LoadBalancer IP takes the main-table path, and the kernel's route dump
// carries every local route too (one per ClusterIP and LoadBalancer IP on
// kube-ipvs0), so a dump per IP made a batch quadratic in the number of
// Services. An error opening the connection is every target's; once ctx is
// done, the targets left get its cause.
func (h HostNetwork) Routes(ctx context.Context, targets []Target) ([]Route, []error) {
	routes := make([]Route, len(targets))
	errs := make([]error, len(targets))
	nh, err := h.handle()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return routes, errs
	}
	defer nh.Close()
	rc := newRouteCache(nh)
	for i, t := range targets {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("looking up the route to %s: %w", t.IP, context.Cause(ctx))
			continue
		}
		routes[i], errs[i] = rc.route(t.IP.Unmap(), t.Interface)
	}
	return routes, errs
}

// routeCache answers route lookups over one netlink handle, reading what
// does not depend on the looked-up address (the main table per family, links
// by index and name, addresses per link and family) once. It lives for one
// batch: nothing in it is watched.
type routeCache struct {
	nh       *netlink.Handle
	main     map[int][]netlink.Route // family → main-table routes
	mainErr  map[int]error
	links    map[int]netlink.Link
	byName   map[string]netlink.Link
	addrs    map[addrKey][]netlink.Addr
	resolves map[int]bool // link index → up and does ARP/NDP
}

type addrKey struct{ index, family int }

func newRouteCache(nh *netlink.Handle) *routeCache {
	return &routeCache{
		nh:       nh,
		main:     map[int][]netlink.Route{},
		mainErr:  map[int]error{},
		links:    map[int]netlink.Link{},
		byName:   map[string]netlink.Link{},
		addrs:    map[addrKey][]netlink.Addr{},
		resolves: map[int]bool{},
	}
}

func (rc *routeCache) linkByName(name string) (netlink.Link, error) {
	if l, ok := rc.byName[name]; ok {
		return l, nil
	}
	l, err := rc.nh.LinkByName(name)
	if err != nil {
		return nil, err
	}
	rc.byName[name], rc.links[l.Attrs().Index] = l, l
	return l, nil
}

func (rc *routeCache) linkByIndex(idx int) (netlink.Link, error) {
	if l, ok := rc.links[idx]; ok {
		return l, nil
	}
	l, err := rc.nh.LinkByIndex(idx)
	if err != nil {
		return nil, err
	}
	rc.links[idx] = l
	return l, nil
}

func (rc *routeCache) addrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	k := addrKey{link.Attrs().Index, family}
	if a, ok := rc.addrs[k]; ok {
		return a, nil
	}
	a, err := rc.nh.AddrList(link, family)
	if err != nil {
		return nil, err
	}
	rc.addrs[k] = a
	return a, nil
}

// mainTable returns the main table's routes of family. The dump is read
// without a table filter: the netlink library then skips every other table
// before decoding it, where a table filter would decode the whole local
// table (thousands of routes on an IPVS node) to throw it away.
func (rc *routeCache) mainTable(family int) ([]netlink.Route, error) {
	if r, ok := rc.main[family]; ok {
		return r, rc.mainErr[family]
	}
	var routes []netlink.Route
	err := rc.nh.RouteListFilteredIter(family, &netlink.Route{}, 0, func(r netlink.Route) bool {
		if r.Table == unix.RT_TABLE_MAIN {
			routes = append(routes, r)
		}
		return true
	})
	if err != nil {
		err = fmt.Errorf("listing the main routing table: %w", err)
	}
	rc.main[family], rc.mainErr[family] = routes, err
	return routes, err
}

// route looks up where requests for ip go out (see Route).
func (rc *routeCache) route(ip netip.Addr, iface string) (Route, error) {
	var err error

	var forced netlink.Link
	if iface != "" {
		forced, err = rc.linkByName(iface)
		if err != nil {
			return Route{}, fmt.Errorf("looking up interface %s: %w", iface, err)
		}
	}
	var opts netlink.RouteGetOptions
	if forced != nil {
		opts.OifIndex = forced.Attrs().Index
	}
	routes, err := rc.nh.RouteGetWithOptions(ip.AsSlice(), &opts)
	var rt *netlink.Route
	if err == nil && len(routes) > 0 && routes[0].Type != unix.RTN_LOCAL {
		rt = &routes[0]
	} else {
		rt, err = rc.mainTableMatch(ip, forced)
		if err != nil {
			return Route{}, err
		}
	}
	if rt.Gw != nil && forced == nil {
		return Route{}, fmt.Errorf("route to %s goes via %s: %w", ip, rt.Gw, ErrNotOnLink)
	}
	link := forced
	if link == nil {
		link, err = rc.linkByIndex(rt.LinkIndex)
		if err != nil {
			return Route{}, fmt.Errorf("looking up interface %d for %s: %w", rt.LinkIndex, ip, err)
		}
	}
	attrs := link.Attrs()
	if len(attrs.HardwareAddr) != 6 {
		return Route{}, fmt.Errorf("route to %s leaves through %s, which is not an Ethernet interface", ip, attrs.Name)
	}
	src, ok := netip.AddrFromSlice(rt.Src)
	src = src.Unmap()
	if ip.Is6() || !ok || !src.Is4() || (forced != nil && !rc.linkHas(link, src)) {
		src = rc.pickSource(link, ip)
	}
	if src.Is6() && src.IsUnspecified() {
		// A solicitation from :: carries no source link-layer address, and
		// MetalLB's speaker ignores those: every IP would read no-reply.
		return Route{}, fmt.Errorf("%s has no usable IPv6 address to send neighbour solicitations from (IPv6 off, or its link-local address still tentative)", attrs.Name)
	}
	return Route{Interface: attrs.Name, Index: attrs.Index, MAC: attrs.HardwareAddr, Src: src}, nil
}

// mainTableMatch finds the longest-prefix route to ip in the main table
// (restricted to link when not nil).
func (rc *routeCache) mainTableMatch(ip netip.Addr, link netlink.Link) (*netlink.Route, error) {
	routes, err := rc.mainTable(familyOf(ip))
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", ip, err)
	}
	var best *netlink.Route
	bestLen := -1
	for i := range routes {
		r := &routes[i]
		if link != nil && r.LinkIndex != link.Attrs().Index {
			continue
		}
		if link == nil && !rc.linkResolves(r.LinkIndex) {
			// An address on kube-ipvs0 gets a main-table host route (IPv6)
			// once someone brings the dummy up; nobody answers there.
			continue
		}
		plen := 0
		if r.Dst != nil {
			pfx, ok := prefixOf(r.Dst)
			if !ok || !pfx.Contains(ip) {
				continue
			}
			plen = pfx.Bits()
		}
		if plen > bestLen || (plen == bestLen && r.Priority < best.Priority) {
			best, bestLen = r, plen
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no route to %s", ip)
	}
	return best, nil
}

// linkResolves reports whether the link with index idx is up and resolves
// neighbours (no IFF_NOARP, which dummy and ifb devices carry). A link that
// cannot be read counts as resolving: the lookup that follows reports its
// error.
func (rc *routeCache) linkResolves(idx int) bool {
	if ok, found := rc.resolves[idx]; found {
		return ok
	}
	ok := true
	if l, err := rc.linkByIndex(idx); err == nil {
		f := l.Attrs().RawFlags
		ok = f&unix.IFF_UP != 0 && f&unix.IFF_NOARP == 0
	}
	rc.resolves[idx] = ok
	return ok
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// familyOf returns ip's netlink address family.
func familyOf(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// pickSource returns the source of requests for ip on link, in ip's family.
// For IPv4: the link's address on ip's subnet, else its first address, else
// 0.0.0.0 (an ARP probe, which owners answer too). For IPv6: the link's
// link-local address first (the kernel's own choice for a solicitation to a
// link-scope multicast group, RFC 6724 rule 2), then the address on ip's
// subnet, the first one, else :: (which Route refuses). Tentative and
// duplicate addresses are never used.
func (rc *routeCache) pickSource(link netlink.Link, ip netip.Addr) netip.Addr {
	none := netip.IPv4Unspecified()
	if ip.Is6() {
		none = netip.IPv6Unspecified()
	}
	addrs, err := rc.addrList(link, familyOf(ip))
	if err != nil {
		return none
	}
	var first, onSubnet, linkLocal netip.Addr
	for _, a := range addrs {
		pfx, ok := prefixOf(a.IPNet)
		if !ok || a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		addr, _ := netip.AddrFromSlice(a.IP)
		addr = addr.Unmap()
		switch {
		case addr.Is6() && addr.IsLinkLocalUnicast():
			if !linkLocal.IsValid() {
				linkLocal = addr
			}
			continue
		case pfx.Contains(ip) && !onSubnet.IsValid():
			onSubnet = addr
		}
		if !first.IsValid() {
			first = addr
		}
	}
	for _, a := range []netip.Addr{linkLocal, onSubnet, first} {
		if a.IsValid() {
			return a
		}
	}
	return none
}

func (rc *routeCache) linkHas(link netlink.Link, ip netip.Addr) bool {
	addrs, err := rc.addrList(link, netlink.FAMILY_V4)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if addr, ok := netip.AddrFromSlice(a.IP); ok && addr.Unmap() == ip {
			return true
		}
	}
	return false
}

// socketConfig attaches a kernel filter that passes only ARP replies (IPv4)
// or neighbour advertisements (IPv6), so the reader is not woken by every
// request or every IPv6 packet on a busy segment.
func socketConfig(v6 bool) (*packet.Config, error) {
	var prog []bpf.RawInstruction
	var err error
	if v6 {
		const (
			nextHeaderOffset = 14 + 6  // Ethernet header, then IPv6 version…payload length
			icmpTypeOffset   = 14 + 40 // Ethernet and IPv6 headers (an advertisement has no extension header)
		)
		prog, err = bpf.Assemble([]bpf.Instruction{
			bpf.LoadAbsolute{Off: 12, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.ETH_P_IPV6, SkipTrue: 5},
			bpf.LoadAbsolute{Off: nextHeaderOffset, Size: 1},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_ICMPV6, SkipTrue: 3},
			bpf.LoadAbsolute{Off: icmpTypeOffset, Size: 1},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 136, SkipTrue: 1}, // neighbour advertisement
			bpf.RetConstant{Val: 1600},
			bpf.RetConstant{Val: 0},
		})
	} else {
		const arpOpOffset = 14 + 6 // Ethernet header, then hardware/protocol type and sizes
		prog, err = bpf.Assemble([]bpf.Instruction{
			bpf.LoadAbsolute{Off: 12, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.ETH_P_ARP, SkipTrue: 3},
			bpf.LoadAbsolute{Off: arpOpOffset, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 2, SkipTrue: 1}, // ARPOP_REPLY
			bpf.RetConstant{Val: 1600},
			bpf.RetConstant{Val: 0},
		})
	}
	if err != nil {
		return nil, fmt.Errorf("assembling the reply filter: %w", err)
	}
	return &packet.Config{Filter: prog}, nil
}

// etherType is the protocol a socket for r's family listens to.
func etherType(r Route) int {
	if r.Src.Is6() {
		return unix.ETH_P_IPV6
	}
	return unix.ETH_P_ARP
}

// Listen implements Network: an AF_PACKET socket for ARP frames (IPv6
// frames when r's source is IPv6) on r's interface, with a large receive buffer.
func (h HostNetwork) Listen(_ context.Context, r Route) (Socket, net.Addr, error) {
	ifi := &net.Interface{Index: r.Index, Name: r.Interface, HardwareAddr: r.MAC}
	var (
		conn *packet.Conn
		err  error
	)
	cfg, err := socketConfig(r.Src.Is6())
	if err != nil {
		return nil, nil, err
	}
	proto := etherType(r)
	if h.NetNSPath == "" {
		conn, err = packet.Listen(ifi, packet.Raw, proto, cfg)
	} else {
		conn, err = listenInNetNS(h.NetNSPath, ifi, proto, cfg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("opening %s socket on %s: %w", FamilyOf(r.Src).Protocol(), r.Interface, err)
	}
	// A raw socket sends the frame's own Ethernet header; the address only
	// names the interface's link layer.
	bcast := &packet.Addr{HardwareAddr: ethernetBroadcast}
	rc, err := conn.SyscallConn()
	if err != nil {
		return conn, bcast, nil
	}
	stamped := false
	_ = rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, recvBuffer) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, recvBuffer)
		}
		stamped = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) == nil
	})
	if !stamped {
		return conn, bcast, nil
	}
	return &stampedConn{Conn: conn, rc: rc, oob: make([]byte, 128)}, bcast, nil
}

// stampedConn reads frames with the kernel's receive timestamp
// (SO_TIMESTAMPNS), so a reply's RTT does not include the time the reader
// goroutine took to be scheduled. One goroutine reads at a time (oob is
// reused).
type stampedConn struct {
	*packet.Conn
	rc  syscall.RawConn
	oob []byte
}

// ReadFromStamped reads one frame and returns when the kernel received it.
// It honours the read deadline like ReadFrom.
func (c *stampedConn) ReadFromStamped(b []byte) (int, time.Time, error) {
	var (
		n, oobn int
		rerr    error
	)
	err := c.rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), b, c.oob, unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	if rerr != nil {
		return 0, time.Time{}, os.NewSyscallError("recvmsg", rerr)
	}
	var ts time.Time
	if msgs, err := unix.ParseSocketControlMessage(c.oob[:oobn]); err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
				t := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				ts = time.Unix(t.Unix())
			}
		}
	}
	return n, ts, nil
}

// listenInNetNS opens the socket from a goroutine locked to a thread that is
// moved into the namespace. The thread is never unlocked, so the runtime
// retires it when the goroutine ends rather than reusing a thread in a
// foreign namespace.
func listenInNetNS(path string, ifi *net.Interface, proto int, cfg *packet.Config) (*packet.Conn, error) {
	type result struct {
		conn *packet.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			ch <- result{err: fmt.Errorf("opening network namespace %s: %w", path, err)}
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			ch <- result{err: fmt.Errorf("entering network namespace %s: %w", path, err)}
			return
		}
		c, err := packet.Listen(ifi, packet.Raw, proto, cfg)
		ch <- result{conn: c, err: err}
	}()
	r := <-ch
	return r.conn, r.err
}

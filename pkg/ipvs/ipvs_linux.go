// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ipvs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	_ "unsafe" // for go:linkname

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// moby/ipvs v1.1.0 keeps two process-wide variables that make it unusable
// as-is for an observer (netlink_linux.go):
//
//   - ipvsOnce guards setup(), which the first ipvs.New runs: it execs
//     `modprobe -va ip_vs` (a mutation) and then resolves the IPVS generic
//     netlink family id once.
//   - ipvsFamily is that family id, used by every request of every handle and
//     never refreshed. The kernel allocates generic-netlink ids cyclically, so
//     after ip_vs is unloaded and loaded again the family has a new id and
//     every request with the old one fails with ENOENT for the life of the
//     process.
//
// The library offers no way to avoid either, so this package reaches the two
// variables by name: it completes ipvsOnce with a no-op before the first
// ipvs.New (so modprobe is never executed), and sets ipvsFamily itself from a
// generic-netlink family dump before every read. The module is pinned to
// v1.1.0 in go.mod; TestMobyTrapsDisarmed fails if a new version renames them.
//
//go:linkname mobyOnce github.com/moby/ipvs.ipvsOnce
var mobyOnce sync.Once

//go:linkname mobyFamily github.com/moby/ipvs.ipvsFamily
var mobyFamily int

// mobyMu serialises every use of moby/ipvs in the process, because
// mobyFamily is process-wide: it guards mobyFamily and every request made
// through a moby handle.
var mobyMu sync.Mutex

// disarmMobySetup makes moby/ipvs's one-time setup a no-op. Safe to call
// any number of times, from any goroutine.
func disarmMobySetup() { mobyOnce.Do(func() {}) }

// Option configures a Handle.
type Option func(*Handle)

// WithNetNS reads the IPVS table of the network namespace at path (e.g.
// /proc/<pid>/ns/net) instead of the caller's. Real servers then come from
// one netlink dump per virtual server: the kernel's file lists only the
// reading task's namespace.
func WithNetNS(path string) Option { return func(h *Handle) { h.nsPath = path } }

// withoutProcFS makes the Handle read every real server through netlink,
// as it does when the kernel's file cannot be read (tests compare the two).
func withoutProcFS() Option { return func(h *Handle) { h.procPath = "" } }

// procIPVSPath lists the IPVS table of the reading task's network namespace.
// It is the process's own /proc, not the host root's: netlink reads the same
// namespace.
const procIPVSPath = "/proc/self/net/ip_vs"

// procIPVSLimit bounds the file read: about 2 MiB is 10,000 virtual servers
// with 2 real servers each, 16 MiB about 300,000 real servers (some 20 MiB
// once parsed; the file itself is parsed as it is read, never held);
// beyond the limit the table is read through netlink.
var procIPVSLimit = hostfs.Limit{Kind: "the IPVS table", Max: 16 << 20}

// Handle reads the IPVS table through moby/ipvs. It is safe for concurrent
// use; reads are serialised.
//
// Every Table call first checks that ip_vs is loaded (files under root only),
// then resolves the IPVS family id by dumping the generic-netlink families (a
// dump never asks the kernel to load a module, unlike a by-name lookup), and
// re-creates the moby handle whenever the id changed. Virtual servers come
// from moby/ipvs's services dump; their real servers from one read of
// /proc/net/ip_vs, and through netlink for any virtual server the file does
// not list (a firewall mark, one created between the two reads) or when the
// file cannot be read.
type Handle struct {
	root     hostfs.Root
	nsPath   string
	procPath string // "" reads real servers through netlink only

	// families lists the generic-netlink families (seam for tests).
	families func(nsPath string) (map[string]int, error)

	// mu guards h, dests and family.
	mu     sync.Mutex
	h      *mobyipvs.Handle
	dests  *destReader // nil in another network namespace: moby's GetDestinations then
	family int
}

var _ Interface = (*Handle)(nil)

// New returns a Handle for the host at root. It does not touch the kernel.
func New(root hostfs.Root, opts ...Option) *Handle {
	disarmMobySetup()
	h := &Handle{root: root, families: genlFamilies, procPath: procIPVSPath}
	for _, o := range opts {
		o(h)
	}
	if h.nsPath != "" {
		h.procPath = ""
	}
	return h
}

// Close releases the netlink socket.
func (h *Handle) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closeLocked()
}

func (h *Handle) closeLocked() {
	if h.h != nil {
		h.h.Close()
		h.h = nil
	}
	h.dests.close()
	h.dests = nil
	h.family = 0
}

// Table implements Interface.
func (h *Handle) Table(ctx context.Context) (Table, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	loaded, err := ModuleLoaded(h.root)
	if err != nil {
		return nil, err
	}
	if !loaded {
		h.closeLocked()
		return nil, ErrModuleNotLoaded
	}
	t, err := h.readLocked(ctx)
	if errors.Is(err, syscall.ENOENT) {
		// The family vanished between the dump and the read (ip_vs being
		// unloaded or reloaded right now): resolve again, once.
		klog.FromContext(ctx).V(2).Info("IPVS family id went stale, re-resolving", "module", "ip_vs")
		h.closeLocked()
		t, err = h.readLocked(ctx)
	}
	return t, err
}

// Timeouts implements TimeoutReader: IPVS's TCP, TCP-FIN and UDP
// connection timeouts (`ipvsadm -L --timeout`), read through netlink.
func (h *Handle) Timeouts(ctx context.Context) (Timeouts, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	loaded, err := ModuleLoaded(h.root)
	if err != nil {
		return Timeouts{}, err
	}
	if !loaded {
		h.closeLocked()
		return Timeouts{}, ErrModuleNotLoaded
	}
	t, err := h.timeoutsLocked(ctx)
	if errors.Is(err, syscall.ENOENT) {
		h.closeLocked()
		t, err = h.timeoutsLocked(ctx)
	}
	return t, err
}

func (h *Handle) timeoutsLocked(ctx context.Context) (Timeouts, error) {
	if err := h.openLocked(ctx); err != nil {
		return Timeouts{}, err
	}
	mobyMu.Lock()
	defer mobyMu.Unlock()
	mobyFamily = h.family
	c, err := h.h.GetConfig()
	if err != nil {
		return Timeouts{}, fmt.Errorf("reading IPVS timeouts: %w", err)
	}
	return Timeouts{TCP: c.TimeoutTCP, TCPFin: c.TimeoutTCPFin, UDP: c.TimeoutUDP}, nil
}

// openLocked resolves the IPVS family id and (re)opens the moby handle
// when it changed.
func (h *Handle) openLocked(ctx context.Context) error {
	fams, err := h.families(h.nsPath)
	if err != nil {
		return fmt.Errorf("listing generic netlink families: %w", err)
	}
	id, ok := fams["IPVS"]
	if !ok {
		// Listed in /proc/modules but not registered (yet, or any more).
		return fmt.Errorf("%w: the IPVS netlink family is not registered", ErrModuleNotLoaded)
	}
	if id != h.family || h.h == nil {
		if h.h != nil {
			klog.FromContext(ctx).Info("IPVS netlink family changed (ip_vs reloaded), reopening", "module", "ip_vs", "old", h.family, "new", id)
			h.h.Close()
			h.h = nil
		}
		disarmMobySetup()
		mh, err := mobyipvs.New(h.nsPath)
		if err != nil {
			return fmt.Errorf("opening IPVS netlink socket: %w", err)
		}
		h.h, h.family = mh, id
		h.dests.close()
		h.dests = nil
		if h.nsPath == "" {
			if h.dests, err = newDestReader(); err != nil {
				return err
			}
		}
	}

	return nil
}

func (h *Handle) readLocked(ctx context.Context) (Table, error) {
	if err := h.openLocked(ctx); err != nil {
		return nil, err
	}
	mobyMu.Lock()
	defer mobyMu.Unlock()
	mobyFamily = h.family
	svcs, err := h.h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("listing IPVS services: %w", err)
	}
	// Read after the dump: a virtual server listed there but not here was
	// created in between (or is a firewall mark) and is asked for alone.
	proc := h.readProcLocked(ctx)
	t := make(Table, 0, len(svcs))
	for _, s := range svcs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		v, err := fromMobyService(s)
		if err != nil {
			return nil, err
		}
		if rs, ok := proc[v.Key()]; ok {
			t = append(t, Entry{Virtual: v, Real: rs})
			continue
		}
		var dests []*mobyipvs.Destination
		if h.dests != nil {
			dests, err = h.dests.destinations(h.family, s)
		} else {
			dests, err = h.h.GetDestinations(s)
		}
		if err != nil {
			return nil, fmt.Errorf("listing real servers of %s: %w", v, err)
		}
		e := Entry{Virtual: v, Real: make([]RealServer, 0, len(dests))}
		for _, d := range dests {
			r, err := fromMobyDestination(d)
			if err != nil {
				return nil, err
			}
			e.Real = append(e.Real, r)
		}
		t = append(t, e)
	}
	return t, nil
}

// readProcLocked reads the real servers of the caller's network namespace
// from procPath; nil (everything through netlink) when it is not to be or
// cannot be read, which it logs.
func (h *Handle) readProcLocked(ctx context.Context) procRealServers {
	if h.procPath == "" {
		return nil
	}
	f, err := hostfs.New("/").OpenLimited(h.procPath, procIPVSLimit)
	if err == nil {
		var rs procRealServers
		rs, err = readProcIPVS(f)
		f.Close()
		if err == nil {
			return rs
		}
	}
	klog.FromContext(ctx).V(2).Info("Reading real servers through netlink", "file", h.procPath, "err", err)
	return nil
}

// genlFamilies dumps the generic-netlink families of the namespace at nsPath
// ("" for the caller's) by name.
func genlFamilies(nsPath string) (map[string]int, error) {
	nh := &netlink.Handle{}
	if nsPath != "" {
		ns, err := netns.GetFromPath(nsPath)
		if err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", nsPath, err)
		}
		defer ns.Close()
		nh, err = netlink.NewHandleAt(ns, syscall.NETLINK_GENERIC)
		if err != nil {
			return nil, fmt.Errorf("opening netlink in %s: %w", nsPath, err)
		}
		defer nh.Close()
	}
	fams, err := nh.GenlFamilyList()
	if err != nil {
		return nil, err
	}
	m := make(map[string]int, len(fams))
	for _, f := range fams {
		m[f.Name] = int(f.ID)
	}
	return m, nil
}

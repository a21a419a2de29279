// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

var (
	limitBuiltin = hostfs.Limit{Kind: "modules.builtin", Max: 1 << 20}
	limitComm    = hostfs.Limit{Kind: "a process name", Max: 64}
)

// HostSources returns the real readers of the node at root. Interfaces,
// addresses and routes are those of this process's network namespace (the
// agent runs with hostNetwork).
func HostSources(root hostfs.Root) Host {
	return Host{
		KernelRelease: root.KernelRelease,
		ModulesDisabled: func() (bool, error) {
			b, err := root.ReadFile("/proc/sys/kernel/modules_disabled", limitSysctl)
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil // no module support: nothing to disable
			}
			if err != nil {
				return false, fmt.Errorf("reading kernel.modules_disabled: %w", err)
			}
			return strings.TrimSpace(string(b)) == "1", nil
		},
		ModulesDisabledBy: func() []string { return modulesDisabledFiles(root) },
		Modprobe:          func() (*modules.ModprobeConfig, error) { return modules.ReadModprobeDirs(root) },
		Loaded:            func() (map[string]bool, error) { return loadedModules(root) },
		BuiltIn:           func() (map[string]bool, error) { return builtinModules(root) },
		Ships: func() (func(string) bool, error) {
			rel, err := root.KernelRelease()
			if err != nil {
				return nil, err
			}
			ix, err := modules.ReadIndex(root, rel)
			if err != nil || ix.DepMissing {
				return nil, err
			}
			return ix.Ships, nil
		},
		Links:   hostLinks,
		Primary: primaryAddrs,
		Connections: func(keep func(ipvs.ConnKey) bool) (ipvs.ConnCounts, error) {
			c, err := ipvs.ReadConnCounts(root, "/proc/net/ip_vs_conn", keep)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil
			}
			return c, err
		},
		Processes: func() ([]string, error) { return processNames(root) },
	}
}

// loadedModules returns the nf_tables modules loaded or built in; nil when
// the kernel has no module support (no /proc/modules: all is built in).
func loadedModules(root hostfs.Root) (map[string]bool, error) {
	procs, err := modules.ReadProcModules(root)
	if err != nil {
		return nil, err
	}
	if _, err := root.Stat("/proc/modules"); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	out := map[string]bool{}
	for _, p := range procs {
		out[p.Name] = true
	}
	if bi, err := builtinModules(root); err == nil {
		for m := range bi {
			out[m] = true
		}
	}
	for _, ms := range ExprModules {
		for _, m := range ms {
			if _, err := root.Stat("/sys/module/" + m); err == nil {
				out[m] = true
			}
		}
	}
	return out, nil
}

// builtinModules returns the modules built into the running kernel, from
// its modules.builtin.
func builtinModules(root hostfs.Root) (map[string]bool, error) {
	rel, err := root.KernelRelease()
	if err != nil {
		return nil, err
	}
	b, err := root.ReadFile(path.Join("/lib/modules", rel, "modules.builtin"), limitBuiltin)
	if err != nil {
		return nil, err
	}
	bi, err := modules.ParseModulesBuiltin(strings.NewReader(string(b)))
	if err != nil {
		return nil, fmt.Errorf("reading modules.builtin: %w", err)
	}
	return bi, nil
}

func hostLinks() ([]Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	// One dump of every address, grouped by interface: AddrList per link
	// would dump them all once per link (kube-ipvs0 holds one per Service).
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	byIndex := map[int][]netip.Addr{}
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			byIndex[a.LinkIndex] = append(byIndex[a.LinkIndex], ip.Unmap())
		}
	}
	out := make([]Link, 0, len(links))
	for _, l := range links {
		out = append(out, Link{Name: l.Attrs().Name, Addrs: byIndex[l.Attrs().Index]})
	}
	return out, nil
}

// primaryAddrs returns the source addresses of the routes to the world
// (one IPv4, one IPv6): the addresses kube-proxy's nodePortAddresses
// "primary" means on a node whose Node object lists them.
func primaryAddrs() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, dst := range []string{"192.0.2.1", "2001:db8::1"} {
		rs, err := netlink.RouteGet(net.ParseIP(dst))
		if err != nil {
			continue // no route of that family
		}
		for _, r := range rs {
			if a, ok := netip.AddrFromSlice(r.Src); ok && a.IsValid() && !a.IsUnspecified() {
				out = append(out, a.Unmap())
			}
		}
	}
	return out, nil
}

// processNames returns the command names (/proc/<pid>/comm) of the
// processes visible at root.
func processNames(root hostfs.Root) ([]string, error) {
	ents, err := root.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := root.ReadFile("/proc/"+e.Name()+"/comm", limitComm)
		if err != nil {
			continue // gone since listed
		}
		out = append(out, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// HostIPSets lists the ipsets of this network namespace by name.
func HostIPSets() ([]string, error) {
	sets, err := netlink.IpsetListAll()
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	out := make([]string, 0, len(sets))
	for _, s := range sets {
		out = append(out, s.SetName)
	}
	return out, nil
}

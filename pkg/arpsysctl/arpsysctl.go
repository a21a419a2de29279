// SPDX-License-Identifier: Apache-2.0

package arpsysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Sysctl names.
const (
	ArpIgnore   = "arp_ignore"
	ArpAnnounce = "arp_announce"
)

// Values are one conf directory's ARP sysctls.
type Values struct {
	// ArpIgnore is net.ipv4.conf.<x>.arp_ignore.
	ArpIgnore int
	// ArpAnnounce is net.ipv4.conf.<x>.arp_announce.
	ArpAnnounce int
}

// Reading is the ARP sysctls of conf/all and of every interface that can
// receive ARP requests.
type Reading struct {
	// All is conf/all.
	All Values
	// Interfaces are the per-interface values, by name.
	Interfaces map[string]Values
}

// IgnoreSafe reports whether an effective arp_ignore keeps the node from
// answering ARP for addresses held only by another interface (kube-ipvs0).
func IgnoreSafe(v int) bool { return v == 1 || v == 2 || v == 8 }

// AnnounceSafe reports whether an effective arp_announce is what strict ARP needs.
func AnnounceSafe(v int) bool { return v == 2 }

// Finding is one sysctl that lets this node answer or announce ARP for
// kube-ipvs0 addresses (or, with OK, one that does not).
type Finding struct {
	// Sysctl is the full name, e.g. net.ipv4.conf.all.arp_ignore.
	Sysctl string `json:"sysctl"`
	// Interface is the interface whose effective value this is ("all" for conf/all).
	Interface string `json:"interface"`
	// Value is the sysctl's own value.
	Value int `json:"value"`
	// Effective is max(all, interface), what the kernel uses.
	Effective int `json:"effective"`
	// Want says which values are safe.
	Want string `json:"want"`
	// OK is true when Effective is safe.
	OK bool `json:"ok"`
}

// String renders the finding as one line.
func (f Finding) String() string {
	verdict := "ok"
	if !f.OK {
		verdict = "unsafe"
	}
	return fmt.Sprintf("%s = %d (effective on %s: %d, want %s): %s", f.Sysctl, f.Value, f.Interface, f.Effective, f.Want, verdict)
}

// State implements check.Finding: a sysctl publishes no metric of its own;
// the check's status and the StrictARPDisabled condition carry it.
func (f Finding) State() check.State { return check.State{} }

const (
	wantIgnore   = "1, 2 or 8"
	wantAnnounce = "2"
)

// Evaluate judges a Reading: conf/all first, then every interface whose
// effective value is unsafe because of its own value (an interface merely
// inheriting an unsafe conf/all is covered by the conf/all finding). The
// conf/all findings are always returned; problems have !OK.
func Evaluate(r Reading) []Finding {
	out := []Finding{
		{Sysctl: "net.ipv4.conf.all.arp_ignore", Interface: "all", Value: r.All.ArpIgnore, Effective: r.All.ArpIgnore, Want: wantIgnore, OK: IgnoreSafe(r.All.ArpIgnore)},
		{Sysctl: "net.ipv4.conf.all.arp_announce", Interface: "all", Value: r.All.ArpAnnounce, Effective: r.All.ArpAnnounce, Want: wantAnnounce, OK: AnnounceSafe(r.All.ArpAnnounce)},
	}
	names := make([]string, 0, len(r.Interfaces))
	for n := range r.Interfaces {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		v := r.Interfaces[n]
		ign := max(r.All.ArpIgnore, v.ArpIgnore)
		ann := max(r.All.ArpAnnounce, v.ArpAnnounce)
		// An interface whose own value is not above conf/all adds nothing
		// when conf/all is already unsafe: the conf/all finding covers it.
		if !IgnoreSafe(ign) && (IgnoreSafe(r.All.ArpIgnore) || v.ArpIgnore > r.All.ArpIgnore) {
			out = append(out, Finding{Sysctl: "net.ipv4.conf." + n + ".arp_ignore", Interface: n, Value: v.ArpIgnore, Effective: ign, Want: wantIgnore})
		}
		if !AnnounceSafe(ann) && (AnnounceSafe(r.All.ArpAnnounce) || v.ArpAnnounce > r.All.ArpAnnounce) {
			out = append(out, Finding{Sysctl: "net.ipv4.conf." + n + ".arp_announce", Interface: n, Value: v.ArpAnnounce, Effective: ann, Want: wantAnnounce})
		}
	}
	return out
}

// Unsafe returns the findings that are problems.
func Unsafe(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if !f.OK {
			out = append(out, f)
		}
	}
	return out
}

// Safe reports whether no interface can answer or announce ARP for
// kube-ipvs0 addresses.
func Safe(fs []Finding) bool { return len(Unsafe(fs)) == 0 }

// skipInterfaces never receive ARP for LoadBalancer IPs.
var skipInterfaces = map[string]bool{"all": true, "default": true, "lo": true, "kube-ipvs0": true}

// Read reads conf/all and the interfaces' ARP sysctls under root. With
// ifaces empty it reads every interface in /proc/sys/net/ipv4/conf that can
// do ARP (type ether per /sys/class/net/<iface>/type, IFF_NOARP clear; an
// unreadable sysfs counts as ARP-capable), skipping lo and kube-ipvs0.
func Read(root hostfs.Root, ifaces []string) (Reading, error) {
	r := Reading{Interfaces: map[string]Values{}}
	var err error
	if r.All, err = readValues(root, "all"); err != nil {
		return Reading{}, err
	}
	if len(ifaces) == 0 {
		ents, err := os.ReadDir(root.Path("/proc/sys/net/ipv4/conf"))
		if err != nil {
			return Reading{}, fmt.Errorf("listing interfaces: %w", err)
		}
		for _, e := range ents {
			if !skipInterfaces[e.Name()] && arpCapable(root, e.Name()) {
				ifaces = append(ifaces, e.Name())
			}
		}
	}
	for _, n := range ifaces {
		if skipInterfaces[n] || strings.ContainsAny(n, "/\x00") || n == "." || n == ".." {
			continue
		}
		v, err := readValues(root, n)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // interface went away
			}
			return Reading{}, err
		}
		r.Interfaces[n] = v
	}
	return r, nil
}

func readValues(root hostfs.Root, conf string) (Values, error) {
	ign, err := readInt(root.Path("/proc/sys/net/ipv4/conf", conf, ArpIgnore))
	if err != nil {
		return Values{}, err
	}
	ann, err := readInt(root.Path("/proc/sys/net/ipv4/conf", conf, ArpAnnounce))
	if err != nil {
		return Values{}, err
	}
	return Values{ArpIgnore: ign, ArpAnnounce: ann}, nil
}

func readInt(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", p, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", p, err)
	}
	return v, nil
}

const (
	arphrdEther = 1
	iffNoARP    = 0x80
)

func arpCapable(root hostfs.Root, iface string) bool {
	if b, err := os.ReadFile(root.Path("/sys/class/net", iface, "type")); err == nil {
		if t, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && t != arphrdEther {
			return false
		}
	}
	if b, err := os.ReadFile(root.Path("/sys/class/net", iface, "flags")); err == nil {
		if f, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32); err == nil && f&iffNoARP != 0 {
			return false
		}
	}
	return true
}

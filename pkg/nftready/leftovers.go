// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// Leftover kinds, stable (JSON "kind", the metrics' kind label).
const (
	// LeftoverKubeIPVS0: the kube-ipvs0 dummy interface.
	LeftoverKubeIPVS0 = "kube-ipvs0"
	// LeftoverVirtualServer: an IPVS virtual server.
	LeftoverVirtualServer = "virtual-server"
	// LeftoverIPSet: a KUBE-* ipset.
	LeftoverIPSet = "ipset"
	// LeftoverSysctl: the strict-ARP or net.ipv4.vs.* sysctls.
	LeftoverSysctl = "sysctl"
	// LeftoverModulesLoadFile: the modules-load.d file declaring the IPVS modules.
	LeftoverModulesLoadFile = "modules-load-file"
)

// Reasons of the ipvs-leftovers check.
const (
	// ReasonIPVSInUse: kube-proxy runs (or is assumed to run) IPVS mode;
	// nothing is a leftover.
	ReasonIPVSInUse = "IPVSInUse"
	// ReasonNoIPVSLeftovers: kube-proxy runs another mode and IPVS mode
	// left nothing behind.
	ReasonNoIPVSLeftovers = "NoIPVSLeftovers"
	// ReasonIPVSLeftovers: kube-proxy runs another mode and IPVS mode left
	// the findings behind.
	ReasonIPVSLeftovers = "IPVSLeftovers"
)

// Leftover is one thing IPVS mode left on the node.
type Leftover struct {
	// Kind is one of the Leftover* constants.
	Kind string `json:"kind"`
	// Object names it (an interface, "TCP 10.96.0.1:443", an ipset, a
	// sysctl, a file).
	Object string `json:"object"`
	// Message says what it is.
	Message string `json:"message"`
	// Remove are the commands that remove it.
	Remove []string `json:"remove"`
}

// String renders the leftover as one report line.
func (l Leftover) String() string { return l.Kind + ": " + l.Message }

// State publishes the leftover's kind.
func (l Leftover) State() check.State {
	return check.State{Leftover: &check.LeftoverState{Kind: l.Kind}}
}

// IPSetLister lists the names of the node's ipsets; it is only called when
// the ip_set module is loaded (asking otherwise would make the kernel load
// it).
type IPSetLister func() ([]string, error)

// LeftoversConfig builds the ipvs-leftovers check.
type LeftoversConfig struct {
	// Root is the host's filesystem.
	Root hostfs.Root
	// IPVSUse says whether kube-proxy runs IPVS mode.
	IPVSUse check.IPVSUseFunc
	// ReadLink reads kube-ipvs0.
	ReadLink kubeproxy.LinkReader
	// IPVS reads the IPVS table (it reads nothing while ip_vs is not loaded).
	IPVS ipvs.Interface
	// IPSets lists ipsets; nil leaves them out.
	IPSets IPSetLister
	// DeclarationFile is the modules-load.d file ipvs-guard owns (a host
	// path); empty is modules.DefaultDeclarationFile.
	DeclarationFile string
	// RemoveOwn removes DeclarationFile when ipvs-guard wrote it and
	// nothing else is in it, once kube-proxy reported a mode other than
	// IPVS (chart value nftablesMigration.removeOwnLeftovers).
	RemoveOwn bool
}

// LeftoversChecker is the ipvs-leftovers check.
type LeftoversChecker struct{ cfg LeftoversConfig }

// NewLeftoversChecker returns the ipvs-leftovers check.
func NewLeftoversChecker(cfg LeftoversConfig) *LeftoversChecker {
	if cfg.DeclarationFile == "" {
		cfg.DeclarationFile = modules.DefaultDeclarationFile
	}
	return &LeftoversChecker{cfg: cfg}
}

// Name implements check.Checker.
func (c *LeftoversChecker) Name() string { return check.NameIPVSLeftovers }

// maxVirtualServerFindings bounds the virtual servers listed one by one;
// the rest are one finding with "ipvsadm --clear".
const maxVirtualServerFindings = 100

// Run implements check.Checker. Leftovers are advisory: the status is ok
// whether or not there are any (reason IPVSLeftovers when there are), so
// diagnose stays healthy on a migrated node and no Node condition moves;
// the findings go to the report, the metrics and a warning alert.
func (c *LeftoversChecker) Run(ctx context.Context) (check.Result, error) {
	var use check.IPVSUse
	if c.cfg.IPVSUse != nil {
		use = c.cfg.IPVSUse(ctx)
		if u := use; u.Applies {
			msg := "kube-proxy runs in IPVS mode: what IPVS mode sets up is in use, not left behind."
			if u.Mode == "" {
				msg = "kube-proxy's mode is not known, IPVS mode is assumed: nothing is reported as left behind. " + u.Message
			}
			return check.Skipped(check.NameIPVSLeftovers, ReasonIPVSInUse, strings.TrimSpace(msg)), nil
		}
	}
	var out []Leftover
	var errs []error
	if c.cfg.ReadLink != nil {
		l, err := c.cfg.ReadLink(kubeproxy.DummyInterface)
		switch {
		case err != nil:
			errs = append(errs, err)
		case l.Exists:
			out = append(out, Leftover{Kind: LeftoverKubeIPVS0, Object: kubeproxy.DummyInterface,
				Message: fmt.Sprintf("interface %s is still there with %d address(es)", kubeproxy.DummyInterface, len(l.Addrs)),
				Remove:  []string{"ip link delete " + kubeproxy.DummyInterface}})
		}
	}
	ipvsLoaded := false
	if c.cfg.IPVS != nil {
		t, err := c.cfg.IPVS.Table(ctx)
		switch {
		case errors.Is(err, ipvs.ErrModuleNotLoaded):
		case err != nil:
			errs = append(errs, err)
			ipvsLoaded = true
		default:
			ipvsLoaded = true
			out = append(out, virtualServerLeftovers(t)...)
		}
	}
	if c.cfg.IPSets != nil && c.moduleLoaded("ip_set") {
		names, err := c.cfg.IPSets()
		if err != nil {
			errs = append(errs, err)
		}
		for _, n := range names {
			if strings.HasPrefix(n, "KUBE-") {
				out = append(out, Leftover{Kind: LeftoverIPSet, Object: n, Message: "ipset " + n + " is still there",
					Remove: []string{"ipset destroy " + n + "  # after the iptables rules that use it are gone (iptables-save | grep -- '--match-set " + n + " ')"}})
			}
		}
	}
	file, acts, err := c.declarationFile(ctx, use)
	if err != nil {
		errs = append(errs, err)
	}
	// arp_ignore=1 / arp_announce=2 are also a common hardening of their
	// own: they count as IPVS mode's only beside another trace of it.
	traces := len(out) > 0 || ipvsLoaded || file != nil || len(acts) > 0
	out = append(out, c.sysctls(ipvsLoaded, traces)...)
	if file != nil {
		out = append(out, *file)
	}
	if len(errs) > 0 && len(out) == 0 {
		return check.Result{Actions: acts}, errors.Join(errs...)
	}
	res := check.Result{Name: check.NameIPVSLeftovers, Status: check.StatusOK, Actions: acts}
	if len(out) == 0 {
		res.Reason = ReasonNoIPVSLeftovers
		res.Message = "kube-proxy runs another mode and IPVS mode left nothing behind on this node."
		return res, nil
	}
	kinds := map[string]int{}
	var order []string
	for _, l := range out {
		if kinds[l.Kind] == 0 {
			order = append(order, l.Kind)
		}
		kinds[l.Kind]++
		res.Findings = append(res.Findings, l)
		res.Remediation = append(res.Remediation, check.Step(l.Remove))
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
	}
	res.Reason = ReasonIPVSLeftovers
	res.Message = "kube-proxy runs another mode, but IPVS mode left behind: " + strings.Join(parts, ", ") + ". Nothing breaks; remove them with the commands below (virtual servers first, then ipsets, sysctls, modules)."
	if len(errs) > 0 {
		res.Message += " Not all could be read: " + errors.Join(errs...).Error()
	}
	return res, nil
}

func virtualServerLeftovers(t ipvs.Table) []Leftover {
	var out []Leftover
	for i, e := range t {
		if i == maxVirtualServerFindings {
			out = append(out, Leftover{Kind: LeftoverVirtualServer, Object: fmt.Sprintf("%d more", len(t)-i),
				Message: fmt.Sprintf("%d more virtual servers are still there", len(t)-i),
				Remove:  []string{"ipvsadm --clear  # deletes every virtual server on the node"}})
			break
		}
		k := e.Virtual.Key()
		name := VirtualServerName(k)
		out = append(out, Leftover{Kind: LeftoverVirtualServer, Object: name,
			Message: fmt.Sprintf("virtual server %s is still there with %d real server(s)", name, len(e.Real)),
			Remove:  []string{"ipvsadm -D " + ipvsadmService(k)}})
	}
	return out
}

// moduleLoaded reports whether /sys/module/<name> exists.
func (c *LeftoversChecker) moduleLoaded(name string) bool {
	_, err := c.cfg.Root.Stat("/sys/module/" + name)
	return err == nil
}

// ipvsSysctls are the net.ipv4.vs.* values kube-proxy's IPVS mode sets,
// with the kernel's defaults.
var ipvsSysctls = []struct{ name, set, def string }{
	{"net.ipv4.vs.conntrack", "1", "0"},
	{"net.ipv4.vs.expire_nodest_conn", "1", "0"},
	{"net.ipv4.vs.expire_quiescent_template", "1", "0"},
	{"net.ipv4.vs.conn_reuse_mode", "0", "1"},
}

func (c *LeftoversChecker) sysctl(name string) (string, bool) {
	b, err := c.cfg.Root.ReadFile("/proc/sys/"+strings.ReplaceAll(name, ".", "/"), limitSysctl)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// sysctls reports the strict-ARP sysctls (only beside another trace of
// IPVS mode) and kube-proxy's net.ipv4.vs.*.
func (c *LeftoversChecker) sysctls(ipvsLoaded, traces bool) []Leftover {
	var out []Leftover
	ign, ok1 := c.sysctl("net.ipv4.conf.all.arp_ignore")
	ann, ok2 := c.sysctl("net.ipv4.conf.all.arp_announce")
	if traces && ok1 && ok2 && ign == "1" && ann == "2" {
		out = append(out, Leftover{Kind: LeftoverSysctl, Object: "net.ipv4.conf.all.arp_ignore=1,net.ipv4.conf.all.arp_announce=2",
			Message: "net.ipv4.conf.all.arp_ignore=1 and arp_announce=2 (kube-proxy's strict ARP) are still set; nftables mode needs neither",
			Remove: []string{"sysctl -w net.ipv4.conf.all.arp_ignore=0 net.ipv4.conf.all.arp_announce=0",
				"grep -rlE 'arp_(ignore|announce)' /etc/sysctl.conf /etc/sysctl.d  # remove them there too, unless something else on the node needs them"}})
	}
	if !ipvsLoaded {
		return out
	}
	var set []string
	for _, s := range ipvsSysctls {
		if v, ok := c.sysctl(s.name); ok && v == s.set && v != s.def {
			set = append(set, s.name+"="+v)
		}
	}
	if len(set) > 0 {
		out = append(out, Leftover{Kind: LeftoverSysctl, Object: strings.Join(set, ","),
			Message: "kube-proxy's IPVS sysctls are still set: " + strings.Join(set, ", ") + "; they go with the ip_vs module",
			Remove:  []string{"modprobe -r ip_vs_rr ip_vs_wrr ip_vs_sh ip_vs  # once no virtual server is left; add any other ip_vs_* scheduler module lsmod lists"}})
	}
	return out
}

// declarationFile reports (and, when asked, removes) the modules-load.d
// file ipvs-guard declared the IPVS modules in.
func (c *LeftoversChecker) declarationFile(ctx context.Context, use check.IPVSUse) (*Leftover, []string, error) {
	path := c.cfg.DeclarationFile
	b, read, err := c.cfg.Root.ReadFileStat(path, limitDeclarationFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	own := modules.WrittenByIPVSGuard(b)
	if own && c.cfg.RemoveOwn && !use.Assumed {
		// Remove the very file read, through its directory opened inside
		// the root: never what a link on the way points to on the host.
		if err := c.cfg.Root.RemoveIfSame(path, read); err != nil && !errors.Is(err, os.ErrNotExist) {
			return &Leftover{Kind: LeftoverModulesLoadFile, Object: path, Message: fmt.Sprintf("%s (written by ipvs-guard) could not be removed: %v", path, err),
				Remove: []string{"rm " + path}}, nil, nil
		}
		act := "removed " + path + " (ipvs-guard's IPVS module declarations; kube-proxy no longer runs IPVS mode)"
		check.Record(ctx, act)
		klog.FromContext(ctx).Info("Removed ipvs-guard's own modules-load.d file", "file", path)
		return nil, []string{act}, nil
	}
	l := &Leftover{Kind: LeftoverModulesLoadFile, Object: path, Remove: []string{"rm " + path}}
	switch {
	case own && c.cfg.RemoveOwn:
		l.Message = fmt.Sprintf("%s (written by ipvs-guard) still loads the IPVS modules at boot; it is kept while kube-proxy's mode is only assumed (%s)", path, use.Message)
	case own:
		l.Message = fmt.Sprintf("%s (written by ipvs-guard) still loads the IPVS modules at boot; the agent removes it when nftablesMigration.removeOwnLeftovers is true", path)
	default:
		l.Message = fmt.Sprintf("%s still declares IPVS modules for boot; it is not exactly as ipvs-guard writes it (a line was added or changed), so ipvs-guard leaves it to its owner", path)
		l.Remove = []string{"edit " + path + "  # remove the ip_vs* and nf_conntrack lines no one needs any more"}
	}
	return l, nil, nil
}

var (
	limitSysctl          = hostfs.Limit{Kind: "a sysctl", Max: 4 << 10}
	limitDeclarationFile = hostfs.Limit{Kind: "the modules-load.d file ipvs-guard owns", Max: 1 << 20}
)

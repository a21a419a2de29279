// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// NodeLocalDNSAddress is NodeLocal DNSCache's default link-local address.
var NodeLocalDNSAddress = netip.MustParseAddr("169.254.20.10")

// NodeLocalDNSInterface is the dummy interface NodeLocal DNSCache binds to.
const NodeLocalDNSInterface = "nodelocaldns"

// Link is one interface of the node and its addresses.
type Link struct {
	// Name is the interface name.
	Name string
	// Addrs are its addresses.
	Addrs []netip.Addr
}

// KubeProxy is what the readiness report asks kube-proxy (a
// *kubeproxy.Client).
type KubeProxy interface {
	// Configz returns kube-proxy's effective configuration.
	Configz(ctx context.Context) (kubeproxy.Config, error)
	// Version returns kube-proxy's version from its /metrics.
	Version(ctx context.Context) (kubeproxy.Version, error)
}

// Host reads the node. Each function may be nil: what it would tell is then
// left out of the report. HostSources returns the real ones.
type Host struct {
	// KernelRelease is the running kernel's release (uname -r).
	KernelRelease func() (string, error)
	// ModulesDisabled reads kernel.modules_disabled (false when the
	// kernel has no module support).
	ModulesDisabled func() (bool, error)
	// ModulesDisabledBy names the sysctl.d files that set
	// kernel.modules_disabled to 1 (none when it cannot tell).
	ModulesDisabledBy func() []string
	// Modprobe reads modprobe.d (blacklists, install commands).
	Modprobe func() (*modules.ModprobeConfig, error)
	// Loaded returns the modules loaded or built in; nil (no error) when
	// the kernel has no loadable modules at all.
	Loaded func() (map[string]bool, error)
	// BuiltIn returns the modules built into the kernel (a blacklist
	// does not touch them); an error when it cannot tell.
	BuiltIn func() (map[string]bool, error)
	// Ships reads the kernel's module index once and returns whether the
	// kernel ships a module, as a file or built in; nil (no error) when it
	// cannot tell (no modules.dep).
	Ships func() (func(name string) bool, error)
	// Links lists the interfaces and their addresses.
	Links func() ([]Link, error)
	// Primary returns the node's primary addresses (kube-proxy's
	// nodePortAddresses: primary): the source addresses of its default
	// routes.
	Primary func() ([]netip.Addr, error)
	// Connections counts the IPVS connection table's entries per virtual
	// and real server, only those keep returns true for (nil keeps all).
	Connections func(keep func(ipvs.ConnKey) bool) (ipvs.ConnCounts, error)
	// Processes lists the command names of the node's processes.
	Processes func() ([]string, error)
}

// ReadinessConfig builds the nftables-readiness check.
type ReadinessConfig struct {
	// Host reads the node.
	Host Host
	// Prober proves the kernel's nf_tables expressions; nil skips it.
	Prober Prober
	// MayLoadModules lets the probe run when it would make the kernel
	// load nf_tables modules (diagnose --prove-kernel or --fix, an agent
	// with remediation):
	// without it ipvs-guard loads no module, so the probe then runs only
	// when every module it needs is loaded or built in.
	MayLoadModules bool
	// KubeProxy reads kube-proxy's /configz and /metrics; nil leaves the
	// configuration out.
	KubeProxy KubeProxy
	// FallbackVersion reads kube-proxy's version when /metrics has none
	// (the Node's status.nodeInfo.kubeProxyVersion).
	FallbackVersion kubeproxy.VersionSource
	// IPVS reads the node's IPVS table; nil leaves virtual servers out.
	IPVS ipvs.Interface
	// Cluster lists Services and EndpointSlices, to tell kube-proxy's
	// virtual servers from foreign ones; nil reports that it cannot.
	Cluster ipvscheck.Cluster
	// NodeName is this node's name.
	NodeName string
	// Distro words the steps (RKE2's gated releases) and tells what
	// kube-proxy's IPVS cleanup removes at the switch.
	Distro distro.Distro
	// ConfigFile reads kube-proxy's configuration as the operator wrote
	// it (kubeadm's kube-proxy ConfigMap), whose per-mode sections
	// /configz does not show; nil leaves them out.
	ConfigFile func(ctx context.Context) (kubeproxy.Config, error)
}

// ReadinessChecker is the nftables-readiness check.
type ReadinessChecker struct{ cfg ReadinessConfig }

// NewReadinessChecker returns the nftables-readiness check.
func NewReadinessChecker(cfg ReadinessConfig) *ReadinessChecker {
	return &ReadinessChecker{cfg: cfg}
}

// Name implements check.Checker.
func (c *ReadinessChecker) Name() string { return check.NameNFTablesReadiness }

// report collects findings and remediation steps.
type report struct {
	findings []Finding
	steps    []check.Step
	// rke2 is set when the node or kube-proxy's version says RKE2.
	rke2 bool
}

func (r *report) add(kind, sev, object, msg string, steps ...check.Step) {
	r.findings = append(r.findings, Finding{Kind: kind, Severity: sev, Object: object, Message: msg})
	r.steps = append(r.steps, steps...)
}

// Run implements check.Checker. Nothing it reads failing stops the report:
// what could not be read is an info finding naming the error.
func (c *ReadinessChecker) Run(ctx context.Context) (check.Result, error) {
	r := report{rke2: c.cfg.Distro == distro.RKE2}
	c.kernel(ctx, &r)
	c.kubeProxy(ctx, &r)
	links := c.links(&r)
	c.virtualServers(ctx, &r, links)
	c.nodeLocalDNS(&r, links)
	c.calico(&r, links)
	return c.result(r), nil
}

// result orders the findings (blockers first) and words the result.
func (c *ReadinessChecker) result(r report) check.Result {
	rank := map[string]int{SeverityBlocker: 0, SeverityChange: 1, SeverityInfo: 2, SeverityOK: 3}
	sort.SliceStable(r.findings, func(i, j int) bool { return rank[r.findings[i].Severity] < rank[r.findings[j].Severity] })
	count := map[string]int{}
	var blockers []string
	fs := make([]check.Finding, 0, len(r.findings))
	for _, f := range r.findings {
		count[f.Severity]++
		if f.Severity == SeverityBlocker {
			blockers = append(blockers, f.Message)
		}
		fs = append(fs, f)
	}
	res := check.Result{Name: check.NameNFTablesReadiness, Findings: fs, Remediation: r.steps}
	if len(blockers) > 0 {
		res.Status = check.StatusProblem
		res.Reason = ReasonNotReadyForNftables
		res.Message = fmt.Sprintf("This node cannot run kube-proxy in nftables mode yet (%d blocker(s)): %s", len(blockers), strings.Join(blockers, "; "))
		return res
	}
	res.Status = check.StatusOK
	res.Reason = ReasonReadyForNftables
	res.Message = fmt.Sprintf("This node can run kube-proxy in nftables mode: %d change(s) to make before the switch, %d thing(s) to know.", count[SeverityChange], count[SeverityInfo])
	return res
}

// minKernel is the oldest kernel kube-proxy's nftables mode supports.
var minKernel = [2]int{5, 13}

// kernel proves the kernel side: version, modules_disabled, blacklists and
// the expressions themselves.
func (c *ReadinessChecker) kernel(ctx context.Context, r *report) {
	h := c.cfg.Host
	if h.KernelRelease != nil {
		rel, err := h.KernelRelease()
		switch maj, mnr, ok := parseKernel(rel); {
		case err != nil:
			r.add(KindKernelVersion, SeverityInfo, "", fmt.Sprintf("kernel release not read: %v", err))
		case !ok:
			r.add(KindKernelVersion, SeverityInfo, rel, fmt.Sprintf("kernel release %q not understood; kube-proxy's nftables mode needs 5.13 or newer", rel))
		case maj < minKernel[0] || maj == minKernel[0] && mnr < minKernel[1]:
			r.add(KindKernelVersion, SeverityBlocker, rel, fmt.Sprintf("kernel %s is older than 5.13, the oldest kube-proxy's nftables mode runs on", rel),
				check.Step{"Upgrade the node's kernel to 5.13 or newer (the distribution's current kernel) before switching kube-proxy to nftables mode."})
		default:
			r.add(KindKernelVersion, SeverityOK, rel, fmt.Sprintf("kernel %s is 5.13 or newer, as kube-proxy's nftables mode needs", rel))
		}
	}
	var loaded map[string]bool
	if h.Loaded != nil {
		var err error
		if loaded, err = h.Loaded(); err != nil {
			r.add(KindNFTExpression, SeverityInfo, "", fmt.Sprintf("loaded modules not read: %v", err))
			loaded = map[string]bool{}
		}
	}
	missing := MissingModules(loaded) // needed, not loaded or built in
	disabled := false
	if h.ModulesDisabled != nil {
		d, err := h.ModulesDisabled()
		switch {
		case err != nil:
			r.add(KindModulesDisabled, SeverityInfo, "kernel.modules_disabled", fmt.Sprintf("kernel.modules_disabled not read: %v", err))
		case d && len(missing) > 0:
			disabled = true
			r.add(KindModulesDisabled, SeverityBlocker, "kernel.modules_disabled",
				fmt.Sprintf("kernel.modules_disabled is 1, so the kernel cannot load %s, which kube-proxy's nftables rules need", strings.Join(missing, ", ")),
				ModulesDisabledFix(h, missing))
		case d:
			r.add(KindModulesDisabled, SeverityInfo, "kernel.modules_disabled", "kernel.modules_disabled is 1, but every nf_tables module kube-proxy needs is already loaded")
		}
	}
	if h.Modprobe != nil {
		conf, err := h.Modprobe()
		if err != nil {
			r.add(KindModuleBlocked, SeverityInfo, "", fmt.Sprintf("modprobe.d not read: %v", err))
		} else {
			c.blocked(r, conf, loaded)
		}
	}
	c.probe(ctx, r, missing, disabled)
}

// blocked reports the nf_tables modules modprobe.d stops the kernel from
// loading (BlockedModules), unless they are loaded already.
func (c *ReadinessChecker) blocked(r *report, conf *modules.ModprobeConfig, loaded map[string]bool) {
	for _, b := range BlockedModules(conf) {
		if loaded[b.Module] {
			continue
		}
		if b.Install {
			r.add(KindModuleBlocked, SeverityBlocker, b.Module, fmt.Sprintf("%s has %q in %s, so it is never loaded", b.Module, b.Line, b.File), b.Fix())
		} else {
			r.add(KindModuleBlocked, SeverityBlocker, b.Module, fmt.Sprintf("%s is blacklisted in %s, so the kernel does not load it for kube-proxy's nftables rules", b.Module, b.File), b.Fix())
		}
	}
}

// probe runs the prober when it may.
func (c *ReadinessChecker) probe(ctx context.Context, r *report, missing []string, disabled bool) {
	if c.cfg.Prober == nil {
		c.shipped(r, missing, "no kernel probe for a captured host tree (--root): it would prove the running kernel, not the tree's")
		return
	}
	if len(missing) > 0 && !c.cfg.MayLoadModules && !disabled {
		c.shipped(r, missing, fmt.Sprintf("building them would make the kernel load %s, and ipvs-guard loads no module unless asked to (diagnose --prove-kernel, which loads only these, or --fix, or an agent with remediation enabled)", strings.Join(missing, ", ")))
		return
	}
	res, err := c.cfg.Prober.Probe(ctx)
	if err != nil {
		c.shipped(r, missing, err.Error())
		return
	}
	for _, p := range res {
		if p.Err == nil {
			r.add(KindNFTExpression, SeverityOK, p.Expression, fmt.Sprintf("nf_tables expression %s works on this kernel (built in a throwaway table in a private network namespace)", p.Expression))
			continue
		}
		if errors.Is(p.Err, errPrereq) {
			continue
		}
		mods := ExprModules[p.Expression]
		msg := fmt.Sprintf("nf_tables expression %s, which kube-proxy's nftables rules use, does not work on this kernel (tried in a private network namespace): %v", p.Expression, p.Err)
		step := check.Step{fmt.Sprintf("Make the kernel provide nf_tables expression %s (CONFIG_NF_TABLES and its options in the kernel configuration).", p.Expression)}
		if len(mods) > 0 {
			msg += fmt.Sprintf(" (module %s)", strings.Join(mods, ", "))
			step = check.Step{fmt.Sprintf("Make the kernel provide nf_tables expression %s: its modules %s must be built in or loadable (CONFIG_NFT_* in the kernel configuration).", p.Expression, strings.Join(mods, ", "))}
		}
		r.add(KindNFTExpression, SeverityBlocker, p.Expression, msg, step)
	}
	klog.FromContext(ctx).V(4).Info("nf_tables probe done", "features", len(res))
}

// shipped stands in for the probe when it cannot run: a module the
// kernel's index says it does not ship is a blocker, the rest is said to be
// unproven, with why.
func (c *ReadinessChecker) shipped(r *report, missing []string, why string) {
	absent, known := NotShipped(c.cfg.Host, missing)
	for _, m := range absent {
		r.add(KindNFTExpression, SeverityBlocker, m, fmt.Sprintf("the kernel does not ship module %s (neither in modules.dep nor built in), which kube-proxy's nftables rules need", m),
			check.Step{fmt.Sprintf("Install the distribution's full kernel modules package (it ships %s), or a kernel built with it.", m)})
	}
	msg := "kube-proxy's nf_tables expressions not proven by the kernel: " + why
	if known && len(absent) == 0 {
		msg += "; the kernel's module index lists every module they need"
	}
	r.add(KindNFTExpression, SeverityInfo, "", msg)
}

// parseKernel reads major.minor from a kernel release ("6.1.0-56-amd64").
func parseKernel(rel string) (int, int, bool) {
	v, err := utilversion.ParseGeneric(rel)
	if err != nil {
		return 0, 0, false
	}
	return int(v.Major()), int(v.Minor()), true
}

// rke2Gates are the first RKE2 release of each minor that offers
// proxy-mode=nftables; a minor after the last one has it from .0.
var rke2Gates = map[int]int{34: 10, 35: 7, 36: 3}

// rke2LastGated is the last minor with a gate in rke2Gates.
const rke2LastGated = 36

// kubeProxy reads kube-proxy's version and configuration.
func (c *ReadinessChecker) kubeProxy(ctx context.Context, r *report) {
	if c.cfg.KubeProxy == nil {
		return
	}
	v, err := c.cfg.KubeProxy.Version(ctx)
	if err != nil && c.cfg.FallbackVersion != nil {
		v, err = c.cfg.FallbackVersion(ctx)
	}
	if err != nil {
		r.add(KindKubeProxyVersion, SeverityInfo, "", fmt.Sprintf("kube-proxy's version not read (%v): nftables mode needs 1.31 or newer, 1.33 for GA", err))
	} else {
		c.version(r, v)
	}
	cfg, err := c.cfg.KubeProxy.Configz(ctx)
	if err != nil {
		r.add(KindScheduler, SeverityInfo, "", fmt.Sprintf("kube-proxy's configuration (/configz) not read: %v; its IPVS settings are not compared", err))
		return
	}
	if s := cfg.EffectiveScheduler(); s != kubeproxy.DefaultScheduler {
		r.add(KindScheduler, SeverityChange, s, fmt.Sprintf("kube-proxy's IPVS scheduler is %s; nftables mode picks an endpoint at random (numgen), with no scheduler setting", s),
			check.Step{fmt.Sprintf("Decide whether the workloads relying on the %s scheduler can live with random endpoint choice; drop ipvs-scheduler (ipvs.scheduler) with the switch.", s)})
	}
	var timeouts []string
	for _, t := range []struct {
		name string
		d    kubeproxy.Duration
	}{{"tcpTimeout", cfg.IPVS.TCPTimeout}, {"tcpFinTimeout", cfg.IPVS.TCPFinTimeout}, {"udpTimeout", cfg.IPVS.UDPTimeout}} {
		if t.d != 0 {
			timeouts = append(timeouts, t.name+"="+time.Duration(t.d).String())
		}
	}
	if len(timeouts) > 0 {
		obj := strings.Join(timeouts, ",")
		r.add(KindIPVSTimeouts, SeverityChange, obj, fmt.Sprintf("kube-proxy sets IPVS timeouts (%s); nftables mode has none: conntrack's timeouts (net.netfilter.nf_conntrack_tcp_timeout_*, conntrack.tcpEstablishedTimeout) apply instead", strings.Join(timeouts, ", ")),
			check.Step{"Move the IPVS timeouts (ipvs-tcp-timeout, ipvs-tcpfin-timeout, ipvs-udp-timeout) to kube-proxy's conntrack settings (conntrack-tcp-timeout-established, conntrack-tcp-timeout-close-wait) or sysctls, then drop them."})
	}
	if len(cfg.IPVS.ExcludeCIDRs) > 0 {
		obj := strings.Join(cfg.IPVS.ExcludeCIDRs, ",")
		r.add(KindExcludeCIDRs, SeverityChange, obj, fmt.Sprintf("kube-proxy's ipvs.excludeCIDRs is %s; nftables mode has no such setting, and %s", obj, c.cleanup(r).excluded()),
			check.Step{fmt.Sprintf("Move whatever owns virtual servers in %s off IPVS, or out of this node, before the switch.", obj)})
	}
	if cfg.IPVS.StrictARP {
		r.add(KindStrictARP, SeverityInfo, "strictARP", "kube-proxy's ipvs.strictARP is on; it means nothing in nftables mode (LoadBalancer IPs sit on no interface, MetalLB in L2 mode needs nothing from kube-proxy), and the arp_ignore=1/arp_announce=2 it set stay until changed")
	}
	c.modeSettings(ctx, r, cfg)
}

// kube-proxy's defaults for the settings it reads from the active mode's
// section (pkg/proxy/apis/config/v1alpha1/defaults.go; kube-proxy 1.37.1's
// /configz in IPVS mode shows ipvs.minSyncPeriod 1s when unset): syncPeriod
// 30s, minSyncPeriod 1s.
const (
	defaultSyncPeriod    = kubeproxy.Duration(30 * time.Second)
	defaultMinSyncPeriod = kubeproxy.Duration(time.Second)
)

// modeSettings reports the settings kube-proxy reads only from the active
// mode's section (pkg/proxy/apis/config/v1alpha1/conversion.go: syncPeriod
// and minSyncPeriod from ipvs / nftables / iptables, masqueradeAll from
// nftables in nftables mode and from iptables otherwise) that the move
// silently resets: with a configuration file (kubeadm's ConfigMap), those
// its ipvs (or iptables) section sets and its nftables section does not;
// on RKE2 (flags only), --ipvs-sync-period and --ipvs-min-sync-period,
// which kube-proxy applies in IPVS mode only (cmd/kube-proxy/app/options.go
// processV1Alpha1Flags).
func (c *ReadinessChecker) modeSettings(ctx context.Context, r *report, live kubeproxy.Config) {
	if r.rke2 {
		var set []string
		if p := live.IPVS.SyncPeriod; p != 0 && p != defaultSyncPeriod {
			set = append(set, "ipvs-sync-period="+time.Duration(p).String())
		}
		if p := live.IPVS.MinSyncPeriod; p != 0 && p != defaultMinSyncPeriod {
			set = append(set, "ipvs-min-sync-period="+time.Duration(p).String())
		}
		if len(set) == 0 {
			return
		}
		obj := strings.Join(set, ",")
		r.add(KindModeSettings, SeverityChange, obj, fmt.Sprintf("kube-proxy runs with %s; in nftables mode kube-proxy ignores the ipvs-* sync flags and uses iptables-sync-period / iptables-min-sync-period (default 30s / 1s)", strings.Join(set, ", ")),
			check.Step{"Replace " + strings.Join(set, ", ") + " in kube-proxy-arg with the same values as iptables-sync-period= / iptables-min-sync-period= (nftables mode reads those), or drop them for the defaults."})
		return
	}
	if c.cfg.ConfigFile == nil {
		return
	}
	file, err := c.cfg.ConfigFile(ctx)
	if err != nil {
		r.add(KindModeSettings, SeverityInfo, "", fmt.Sprintf("kube-proxy's configuration file not read (%v): the settings kube-proxy reads only from the active mode's section (syncPeriod, minSyncPeriod, masqueradeAll) are not compared", err))
		return
	}
	var lost, steps []string
	if p := file.IPVS.SyncPeriod; p != 0 && file.NFTables.SyncPeriod == 0 && p != defaultSyncPeriod {
		lost = append(lost, fmt.Sprintf("ipvs.syncPeriod %s (nftables.syncPeriod unset: 30s)", time.Duration(p)))
		steps = append(steps, "  syncPeriod: "+time.Duration(p).String())
	}
	if p := file.IPVS.MinSyncPeriod; p != 0 && file.NFTables.MinSyncPeriod == 0 && p != defaultMinSyncPeriod {
		lost = append(lost, fmt.Sprintf("ipvs.minSyncPeriod %s (nftables.minSyncPeriod unset: 1s)", time.Duration(p)))
		steps = append(steps, "  minSyncPeriod: "+time.Duration(p).String())
	}
	if file.IPTables.MasqueradeAll && !file.NFTables.MasqueradeAll {
		lost = append(lost, "iptables.masqueradeAll true, which IPVS mode reads (nftables.masqueradeAll unset: false)")
		steps = append(steps, "  masqueradeAll: true")
	}
	if len(lost) == 0 {
		return
	}
	r.add(KindModeSettings, SeverityChange, "nftables", fmt.Sprintf("kube-proxy reads syncPeriod, minSyncPeriod and masqueradeAll only from the active mode's section, and the configuration sets %s: the move to nftables mode silently resets them", strings.Join(lost, "; ")),
		check.Step(append([]string{"Copy them into the nftables section of the kube-proxy configuration (kubectl -n kube-system edit configmap kube-proxy, config.conf) with the switch:", "nftables:"}, steps...)))
}

// version judges kube-proxy's version.
func (c *ReadinessChecker) version(r *report, v kubeproxy.Version) {
	if strings.Contains(v.GitVersion, "+rke2") {
		r.rke2 = true
	}
	if r.rke2 {
		patch, _ := patchOf(v.GitVersion)
		gate, gated := rke2Gates[v.Minor]
		switch {
		case v.Major == 1 && v.Minor > rke2LastGated:
		case gated && patch >= gate: // every rke2rN of the gated patch
		default:
			// RKE2 passes kube-proxy-arg through whatever its release:
			// the releases are a support statement, not a refusal, so
			// this is worth knowing, not a blocker.
			r.add(KindKubeProxyVersion, SeverityInfo, v.GitVersion, fmt.Sprintf("RKE2 %s passes proxy-mode=nftables to kube-proxy, but RKE2 documents kube-proxy's nftables mode as supported (experimental) only from v1.34.10+rke2r1, v1.35.7+rke2r1 and v1.36.3+rke2r1", v.GitVersion),
				check.Step{"Prefer upgrading RKE2 to v1.34.10+rke2r1, v1.35.7+rke2r1, v1.36.3+rke2r1 or newer before setting kube-proxy-arg: [proxy-mode=nftables]: older releases are not supported by RKE2 in nftables mode."})
			return
		}
		r.add(KindKubeProxyVersion, SeverityInfo, v.GitVersion, fmt.Sprintf("RKE2 %s offers kube-proxy's nftables mode (kube-proxy-arg: [proxy-mode=nftables], marked experimental by RKE2)", v.GitVersion))
		return
	}
	switch {
	case !v.AtLeast(1, 31):
		r.add(KindKubeProxyVersion, SeverityBlocker, v.GitVersion, fmt.Sprintf("kube-proxy %s has no nftables mode (beta from 1.31, GA from 1.33)", v.GitVersion),
			check.Step{"Upgrade the cluster to Kubernetes 1.33 or newer (nftables mode GA) before the switch."})
	case !v.AtLeast(1, 33):
		r.add(KindKubeProxyVersion, SeverityChange, v.GitVersion, fmt.Sprintf("kube-proxy %s has nftables mode as beta; it is GA from 1.33", v.GitVersion),
			check.Step{"Prefer upgrading to Kubernetes 1.33 or newer (nftables mode GA) before the switch."})
	}
}

// patchOf returns the patch number and the rke2rN number of a version
// ("v1.35.7+rke2r1" → 7, 1); -1 when absent.
func patchOf(gv string) (int, int) {
	t := strings.TrimPrefix(strings.TrimSpace(gv), "v")
	parts := strings.SplitN(t, ".", 3)
	if len(parts) < 3 {
		return -1, -1
	}
	rest := parts[2]
	i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	num := rest
	if i >= 0 {
		num = rest[:i]
	}
	patch, err := strconv.Atoi(num)
	if err != nil {
		return -1, -1
	}
	rel := -1
	if _, after, ok := strings.Cut(rest, "+rke2r"); ok {
		if j := strings.IndexFunc(after, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			after = after[:j]
		}
		if n, err := strconv.Atoi(after); err == nil {
			rel = n
		}
	}
	return patch, rel
}

// links lists the node's interfaces; nil when unknown.
func (c *ReadinessChecker) links(r *report) []Link {
	if c.cfg.Host.Links == nil {
		return nil
	}
	ls, err := c.cfg.Host.Links()
	if err != nil {
		r.add(KindNodeLocalDNS, SeverityInfo, "", fmt.Sprintf("interfaces not listed: %v", err))
		return nil
	}
	return ls
}

// virtualServers reports foreign virtual servers, NodePort connections on
// non-primary addresses and the Service IPs that stop being local.
func (c *ReadinessChecker) virtualServers(ctx context.Context, r *report, links []Link) {
	if c.cfg.IPVS == nil {
		return
	}
	table, err := c.cfg.IPVS.Table(ctx)
	switch {
	case errors.Is(err, ipvs.ErrModuleNotLoaded):
		return // no IPVS table: nothing to lose, nothing to compare
	case err != nil:
		r.add(KindForeignVirtualServer, SeverityInfo, "", fmt.Sprintf("IPVS table not read: %v", err))
		return
	}
	local := map[netip.Addr]string{} // address → interface
	var dummy []netip.Addr
	for _, l := range links {
		for _, a := range l.Addrs {
			local[a] = l.Name
			if l.Name == kubeproxy.DummyInterface {
				dummy = append(dummy, a)
			}
		}
	}
	_, hasDummy := linkNamed(links, kubeproxy.DummyInterface)
	if len(table) > 0 || hasDummy {
		c.cleanup(r).report(r, len(table), len(dummy), hasDummy)
	}
	nodePorts := c.foreign(ctx, r, table, local)
	c.nodePortConns(r, table, local, nodePorts)
	if len(dummy) > 0 {
		slices.SortFunc(dummy, func(a, b netip.Addr) int { return a.Compare(b) })
		r.add(KindServiceIPNotLocal, SeverityChange, kubeproxy.DummyInterface,
			fmt.Sprintf("%d Service IP(s) sit on %s (e.g. %s): %s they are no local address, so they stop answering ping, and a host process listening on 0.0.0.0 is no longer reachable on ClusterIP:any-port, only on the Service's ports", len(dummy), kubeproxy.DummyInterface, dummy[0], c.cleanup(r).dummyGone()),
			check.Step{"Find clients that ping Service IPs or reach host-network listeners through a ClusterIP port the Service does not declare; give them the Service's own ports."})
	}
}

// linkNamed returns the link called name.
func linkNamed(links []Link, name string) (Link, bool) {
	for _, l := range links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}

// switchCleanup is what kube-proxy's IPVS cleanup does when kube-proxy
// starts in nftables mode: platformCleanup (cmd/kube-proxy/app/server_linux.go)
// calls ipvs.CleanupLeftovers (pkg/proxy/ipvs/cleanup.go), which first runs
// `modprobe -va ip_vs` and removes nothing when that fails; otherwise it
// flushes every virtual server (foreign ones included), deletes kube-ipvs0,
// IPVS mode's iptables chains and its KUBE-* ipsets. Whether modprobe runs
// depends on kube-proxy's image: the upstream image (kubeadm) has it, RKE2's
// has not.
type switchCleanup int

const (
	// cleanupUnknown: kube-proxy's image is not known (RKE1, another
	// distribution).
	cleanupUnknown switchCleanup = iota
	// cleanupRuns: the upstream image, with modprobe: everything goes.
	cleanupRuns
	// cleanupSkipped: RKE2's image, without modprobe: nothing goes.
	cleanupSkipped
)

// cleanup returns what kube-proxy's IPVS cleanup does on this node.
func (c *ReadinessChecker) cleanup(r *report) switchCleanup {
	switch {
	case r.rke2:
		return cleanupSkipped
	case c.cfg.Distro == distro.Kubeadm:
		return cleanupRuns
	}
	return cleanupUnknown
}

// Wording of what the cleanup does, per case.
const (
	cleanupWhy     = "kube-proxy's IPVS cleanup at the switch runs `modprobe -va ip_vs` first and removes nothing when that fails"
	rke2NoModprobe = "RKE2's kube-proxy image has no modprobe, and " + cleanupWhy
)

// report adds the switch-cleanup finding: what the switch removes, or
// what stays, on this node.
func (s switchCleanup) report(r *report, servers, addrs int, dummy bool) {
	var state []string
	if servers > 0 {
		state = append(state, fmt.Sprintf("%d virtual server(s)", servers))
	}
	if dummy {
		state = append(state, fmt.Sprintf("%s with %d address(es)", kubeproxy.DummyInterface, addrs))
	}
	what := strings.Join(state, " and ")
	switch s {
	case cleanupRuns:
		r.add(KindSwitchCleanup, SeverityInfo, "removed", fmt.Sprintf("at the switch kube-proxy (its upstream image has modprobe) flushes every virtual server on this node, foreign ones included, and deletes %s, IPVS mode's iptables chains and its KUBE-* ipsets: this node has %s; what stays is the strict-ARP and IPVS sysctls, the loaded ip_vs modules and any modules-load.d file (ipvs-leftovers lists them after the switch)", kubeproxy.DummyInterface, what))
	case cleanupSkipped:
		r.add(KindSwitchCleanup, SeverityInfo, "kept", fmt.Sprintf("%s: this node's %s, IPVS mode's iptables chains and KUBE-* ipsets, the sysctls and the ip_vs modules all stay, virtual servers that are not kube-proxy's included, until removed by hand (ipvs-leftovers lists them with the commands after the switch)", rke2NoModprobe, what),
			check.Step{"After the switch remove what RKE2's kube-proxy left with the commands ipvs-leftovers prints (ipvs-guard diagnose), keeping any virtual server something else still needs."})
	}
}

// excluded words what happens to virtual servers in ipvs.excludeCIDRs.
func (s switchCleanup) excluded() string {
	switch s {
	case cleanupRuns:
		return "its IPVS cleanup at the switch flushes every virtual server, those in these CIDRs too"
	case cleanupSkipped:
		return rke2NoModprobe + ", so those in these CIDRs stay, with kube-proxy's own, until removed by hand (never with ipvsadm --clear while they are needed)"
	}
	return "its IPVS cleanup at the switch flushes every virtual server, those in these CIDRs too, when kube-proxy's image has modprobe (" + cleanupWhy + "; the upstream image has it, RKE2's has not)"
}

// uncompared words the fate of virtual servers not compared with the
// cluster's Services.
func (s switchCleanup) uncompared() string {
	switch s {
	case cleanupRuns:
		return "those that are not kube-proxy's are deleted at the switch too"
	case cleanupSkipped:
		return rke2NoModprobe + ", so every one of them stays"
	}
	return "those that are not kube-proxy's are deleted at the switch too when kube-proxy's image has modprobe (the upstream image has it, RKE2's has not)"
}

// dummyGone words when the Service IPs on kube-ipvs0 stop being local.
func (s switchCleanup) dummyGone() string {
	switch s {
	case cleanupRuns:
		return "kube-proxy's IPVS cleanup deletes " + kubeproxy.DummyInterface + " at the switch, and in nftables mode"
	case cleanupSkipped:
		return rke2NoModprobe + ", so they stay local until " + kubeproxy.DummyInterface + " is deleted by hand; after that"
	}
	return "once " + kubeproxy.DummyInterface + " is gone (kube-proxy's IPVS cleanup deletes it at the switch when its image has modprobe; RKE2's has not), in nftables mode"
}

// foreign names the virtual servers that are not kube-proxy's and returns
// the Services' NodePorts (nil without a cluster).
func (c *ReadinessChecker) foreign(ctx context.Context, r *report, table ipvs.Table, local map[netip.Addr]string) map[nodePortKey]bool {
	if c.cfg.Cluster == nil {
		if len(table) > 0 {
			r.add(KindForeignVirtualServer, SeverityInfo, "", fmt.Sprintf("%d virtual server(s) not compared with the cluster's Services (no kubeconfig): %s", len(table), c.cleanup(r).uncompared()))
		}
		return nil
	}
	svcs, err := c.cfg.Cluster.Services(ctx)
	if err != nil {
		r.add(KindForeignVirtualServer, SeverityInfo, "", fmt.Sprintf("Services not listed (%v): virtual servers not compared", err))
		return nil
	}
	expected := map[ipvs.Key]bool{}
	for _, e := range ipvscheck.ExpectedVirtualServers(svcs, nil, c.cfg.NodeName) {
		expected[e.Key] = true
	}
	nodePorts := map[nodePortKey]bool{}
	for _, s := range svcs {
		for _, p := range s.Spec.Ports {
			if p.NodePort == 0 {
				continue
			}
			if proto, err := ipvs.ParseProtocol(string(p.Protocol)); err == nil {
				nodePorts[nodePortKey{proto, uint16(p.NodePort)}] = true
			}
		}
	}
	var steps []string
	for _, e := range table {
		k := e.Virtual.Key()
		if expected[k] {
			continue
		}
		if _, isLocal := local[k.Address]; (isLocal || len(local) == 0) && nodePorts[nodePortKey{k.Protocol, k.Port}] {
			continue // kube-proxy's NodePort on a node address
		}
		name := VirtualServerName(k)
		switch cl := c.cleanup(r); cl {
		case cleanupSkipped:
			r.add(KindForeignVirtualServer, SeverityInfo, name,
				fmt.Sprintf("virtual server %s belongs to no Service; %s, so it stays, and keeps working while the ip_vs module stays loaded", name, rke2NoModprobe))
			steps = append(steps, "ipvsadm -S -n | grep -F -- '"+ipvsadmService(k)+"' # keep it: remove kube-proxy's virtual servers one by one (ipvsadm -D), never with ipvsadm --clear, and unload no ip_vs module while it is needed")
		default:
			why := "kube-proxy's IPVS cleanup at the switch to nftables deletes it (it flushes every virtual server on the node)"
			if cl == cleanupUnknown {
				why = "kube-proxy's IPVS cleanup at the switch to nftables deletes it (it flushes every virtual server on the node) when kube-proxy's image has modprobe (" + cleanupWhy + "; the upstream image has it, RKE2's has not)"
			}
			r.add(KindForeignVirtualServer, SeverityChange, name, fmt.Sprintf("virtual server %s belongs to no Service: %s", name, why))
			steps = append(steps, "ipvsadm -S -n | grep -F -- '"+ipvsadmService(k)+"' # save it; recreate it after the switch (ipvsadm -R) or move its owner off IPVS")
		}
	}
	if len(steps) > 0 {
		head := "Save the virtual servers that are not kube-proxy's before the switch (it deletes them):"
		if c.cleanup(r) == cleanupSkipped {
			head = "The virtual servers that are not kube-proxy's survive the switch on RKE2; keep them when removing IPVS mode's leftovers:"
		}
		r.steps = append(r.steps, check.Step(append([]string{head}, steps...)))
	}
	return nodePorts
}

// nodePortKey is a NodePort: protocol and port.
type nodePortKey struct {
	proto ipvs.Protocol
	port  uint16
}

// nodePortConns reports connections in the IPVS connection table to a
// NodePort on an address that is not primary.
func (c *ReadinessChecker) nodePortConns(r *report, table ipvs.Table, local map[netip.Addr]string, nodePorts map[nodePortKey]bool) {
	h := c.cfg.Host
	if h.Connections == nil || h.Primary == nil || len(local) == 0 {
		return
	}
	primary, err := h.Primary()
	if err != nil || len(primary) == 0 {
		return
	}
	// NodePort virtual servers: on a node address (not kube-ipvs0), and a
	// Service's NodePort when the cluster is known.
	np := map[ipvs.Key]bool{}
	for _, e := range table {
		k := e.Virtual.Key()
		ifc, ok := local[k.Address]
		if !ok || ifc == kubeproxy.DummyInterface || k.Address.IsLoopback() {
			continue
		}
		if nodePorts != nil && !nodePorts[nodePortKey{k.Protocol, k.Port}] {
			continue
		}
		np[k] = true
	}
	if len(np) == 0 {
		return
	}
	seen := map[ipvs.Key]int{}
	counts, err := h.Connections(func(ck ipvs.ConnKey) bool { return np[ck.Virtual] && !slices.Contains(primary, ck.Virtual.Address) })
	for ck, n := range counts {
		if k := ck.Virtual; np[k] && !slices.Contains(primary, k.Address) {
			seen[k] += n
		}
	}
	if err != nil {
		r.add(KindNodePortAddress, SeverityInfo, "", fmt.Sprintf("IPVS connection table not read: %v", err))
		return
	}
	keys := make([]ipvs.Key, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ipvs.Key) int { return strings.Compare(VirtualServerName(a), VirtualServerName(b)) })
	for _, k := range keys {
		name := VirtualServerName(k)
		r.add(KindNodePortAddress, SeverityChange, name,
			fmt.Sprintf("%d connection(s) reached NodePort %s on %s (interface %s), which is not a primary address of this node (%s): nftables mode answers NodePorts only on primary addresses by default", seen[k], name, k.Address, local[k.Address], joinAddrs(primary)),
			check.Step{fmt.Sprintf("Point the clients of %s at a primary address, or set kube-proxy's nodePortAddresses to include %s before the switch.", name, k.Address)})
	}
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// nodeLocalDNS reports NodeLocal DNSCache in its IPVS layout.
func (c *ReadinessChecker) nodeLocalDNS(r *report, links []Link) {
	for _, l := range links {
		if l.Name != NodeLocalDNSInterface {
			continue
		}
		obj := l.Name
		if slices.Contains(l.Addrs, NodeLocalDNSAddress) {
			obj = l.Name + " " + NodeLocalDNSAddress.String()
		}
		r.add(KindNodeLocalDNS, SeverityChange, obj,
			fmt.Sprintf("NodeLocal DNSCache runs here (interface %s%s) in its IPVS layout, where pods query %s only; in nftables mode it can also bind the kube-dns ClusterIP and its iptables/nftables NOTRACK rules apply", l.Name, addrSuffix(l.Addrs), NodeLocalDNSAddress),
			check.Step{"Redeploy NodeLocal DNSCache with its iptables/nftables layout (-localip 169.254.20.10,<kube-dns ClusterIP>) after the switch, and have kubelet's clusterDNS follow."})
		return
	}
}

func addrSuffix(as []netip.Addr) string {
	if len(as) == 0 {
		return ""
	}
	return " with " + joinAddrs(as)
}

// calico reports a Calico node agent (its interfaces or its process).
func (c *ReadinessChecker) calico(r *report, links []Link) {
	var signs []string
	for _, l := range links {
		if l.Name == "vxlan.calico" || l.Name == "vxlan-v6.calico" || l.Name == "wireguard.cali" || strings.HasPrefix(l.Name, "cali") {
			signs = append(signs, "interface "+l.Name)
			break
		}
	}
	if c.cfg.Host.Processes != nil {
		if procs, err := c.cfg.Host.Processes(); err == nil && slices.Contains(procs, "calico-node") {
			signs = append(signs, "process calico-node")
		}
	}
	if len(signs) == 0 {
		return
	}
	obj := strings.Join(signs, ", ")
	r.add(KindCalico, SeverityChange, obj,
		fmt.Sprintf("Calico runs on this node (%s): calico-node reads kube-proxy's mode only at start, so it keeps programming for IPVS after the switch until restarted", obj),
		check.Step{"After kube-proxy runs in nftables mode on the node, restart calico-node there (kubectl -n calico-system delete pod -l k8s-app=calico-node --field-selector spec.nodeName=<node>), and set Felix's dataplane to nftables if Calico should follow."})
}

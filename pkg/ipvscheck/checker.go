// SPDX-License-Identifier: Apache-2.0

package ipvscheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// Reasons of the ipvs check (stable: they become Node condition reasons).
const (
	ReasonOK                   = "IPVSTableOK"
	ReasonModuleNotLoaded      = "IPVSModuleNotLoaded"
	ReasonVirtualServerMissing = "VirtualServerMissing"
	ReasonNoRealServers        = "NoRealServers"
	ReasonSchedulerMismatch    = "SchedulerMismatch"
	ReasonNoKubeconfig         = "NoKubeconfig"
	ReasonNotIPVSMode          = "KubeProxyNotInIPVSMode"
	ReasonServicesUnreadable   = "ServicesUnreadable"
)

// errNoCluster stands for "no kubeconfig" where a cluster read error would be.
var errNoCluster = errors.New("no kubeconfig")

// Config builds the ipvs checker.
type Config struct {
	// IPVS reads the table (ipvs.New for the host).
	IPVS ipvs.Interface
	// ReadLink reads kube-ipvs0 (kubeproxy.ReadLink).
	ReadLink kubeproxy.LinkReader
	// KubeProxy reads kube-proxy's metrics port (optional).
	KubeProxy *kubeproxy.Client
	// Cluster reads Services and EndpointSlices; nil without a kubeconfig.
	Cluster Cluster
	// NodeName is this node's name (for Local traffic policies).
	NodeName string
	// Scheduler resolves the configured scheduler (e.g. a closure over
	// kubeproxy.ResolveScheduler); nil means kubeproxy.DefaultScheduler.
	Scheduler func(ctx context.Context) (scheduler, from string)
	// Distro words the remediation.
	Distro distro.Distro
	// Settle holds back a finding until it persisted for its grace period,
	// so kube-proxy's lag behind a Service change is not reported as a
	// problem on every node; nil reports every finding at once (diagnose).
	Settle *check.Settler
	// IPVSUse, when set, is asked on every Run whether the IPVS
	// prerequisites apply (kube-proxy's mode); when they do not, Run reports
	// check.ReasonIPVSNotInUse and reads nothing else. Nil: they apply.
	IPVSUse check.IPVSUseFunc
}

// Checker is the ipvs check.
type Checker struct {
	cfg Config
	// emptySince holds back the EndpointSlice read for a virtual server
	// without real servers for the settle grace (nil: at once).
	emptySince *check.Settler
}

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the ipvs checker.
func NewChecker(cfg Config) (*Checker, error) {
	if cfg.IPVS == nil || cfg.ReadLink == nil {
		return nil, errors.New("ipvs checker: IPVS and ReadLink are required")
	}
	c := &Checker{cfg: cfg}
	if cfg.Settle != nil {
		c.emptySince = &check.Settler{Grace: cfg.Settle.Grace, Clock: cfg.Settle.Clock}
	}
	return c, nil
}

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameIPVS }

// DefaultSettle is how long the agent lets a virtual server stay missing
// (or without real servers) before it reports it: kube-proxy's IPVS sync
// period, by default, so a Service kube-proxy has simply not synced yet is
// never a problem (and never a Node write on every node).
const DefaultSettle = 30 * time.Second

// maxNamed bounds how many virtual servers a message names.
const maxNamed = 5

// Run implements check.Checker.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameIPVS)
	if c.cfg.IPVSUse != nil {
		if use := c.cfg.IPVSUse(ctx); !use.Applies {
			return use.NotInUse(c.Name()), nil
		}
	}
	res := check.Result{Name: c.Name()}
	table, err := c.cfg.IPVS.Table(ctx)
	if errors.Is(err, ipvs.ErrModuleNotLoaded) {
		return c.moduleNotLoaded(ctx, err)
	}
	if err != nil {
		return check.Result{}, fmt.Errorf("reading the IPVS table: %w", err)
	}
	sched, from := kubeproxy.DefaultScheduler, kubeproxy.FromDefault
	if c.cfg.Scheduler != nil {
		sched, from = c.cfg.Scheduler(ctx)
	}
	sum := Summary{VirtualServers: len(table), RealServers: table.RealServerCount(), Scheduler: sched, SchedulerSource: from}
	// Messages become Node conditions: they name the scheduler, never the
	// table's or the cluster's size, which change with every Service on
	// every node (counts are in the Summary finding and the metrics).
	schedNote := fmt.Sprintf("scheduler %s (from %s)", sched, from)
	logger.V(2).Info("read the IPVS table", "virtualServers", len(table), "realServers", table.RealServerCount())

	var findings []Finding
	var svcs []*corev1.Service
	clusterErr := errNoCluster
	if c.cfg.Cluster != nil {
		// The API being down never stops the node-local part of the check.
		if svcs, clusterErr = c.cfg.Cluster.Services(ctx); clusterErr != nil {
			logger.Info("Cannot read Services, comparing schedulers only", "err", clusterErr)
		}
	}
	if clusterErr != nil {
		if findings, err = c.compareSchedulers(logger, table, sched); err != nil {
			return check.Result{}, err
		}
		if len(findings) == 0 {
			reason, why := ReasonNoKubeconfig, "comparing with Services needs --kubeconfig"
			if clusterErr != errNoCluster {
				reason, why = ReasonServicesUnreadable, fmt.Sprintf("Services could not be read (%v)", clusterErr)
			}
			res := check.Skipped(c.Name(), reason, "the virtual servers on kube-ipvs0 use the configured "+schedNote+"; "+why)
			res.Findings = []check.Finding{sum}
			return res, nil
		}
	} else {
		findings = c.compareWithServices(ctx, logger, svcs, table, sched, &sum)
	}
	res.Findings = append(res.Findings, sum)
	for _, f := range findings {
		res.Findings = append(res.Findings, f)
	}
	if len(findings) == 0 {
		res.Status, res.Reason = check.StatusOK, ReasonOK
		res.Message = "every expected VIP has a virtual server with real servers, " + schedNote
		return res, nil
	}
	res.Status = check.StatusProblem
	res.Reason, res.Message, res.Remediation = c.describe(findings, sched, schedNote)
	return res, nil
}

// compareSchedulers is the check without Services: the virtual servers of
// the addresses on kube-ipvs0 must use sched (settled findings only).
func (c *Checker) compareSchedulers(logger klog.Logger, table ipvs.Table, sched string) ([]Finding, error) {
	link, err := c.cfg.ReadLink(kubeproxy.DummyInterface)
	if err != nil {
		return nil, err
	}
	onLink := map[netip.Addr]bool{}
	for _, a := range link.Addrs {
		onLink[a] = true
	}
	return c.settled(logger, CompareSchedulers(table, func(k ipvs.Key) bool { return onLink[k.Address] }, sched)), nil
}

// compareWithServices compares the table with the virtual servers svcs
// make kube-proxy program on this node (settled findings only) and adds
// the counts to sum.
func (c *Checker) compareWithServices(ctx context.Context, logger klog.Logger, svcs []*corev1.Service, table ipvs.Table, sched string, sum *Summary) []Finding {
	expected := ExpectedVirtualServers(svcs, nil, c.cfg.NodeName)
	expected = onlyFamilies(expected, table)
	c.countReadyEndpoints(ctx, logger, expected, svcs, table)
	findings := c.settled(logger, Compare(expected, table, sched))
	noReal := 0
	for _, f := range findings {
		if f.Problem == ProblemNoRealServers {
			noReal++
		}
	}
	nExpected, nServices := len(expected), len(svcs)
	sum.VirtualServersWithoutRealServers = &noReal
	sum.Expected, sum.Services = &nExpected, &nServices
	return findings
}

// describe gives the reason (the first kind of problem found, in the order
// missing, no real servers, scheduler mismatch), the message (at most
// maxNamed virtual servers of each kind) and the remediation of findings.
func (c *Checker) describe(findings []Finding, sched, schedNote string) (reason, message string, steps []check.Step) {
	counts := map[string][]string{}
	for _, f := range findings {
		counts[f.Problem] = append(counts[f.Problem], f.String())
	}
	var parts []string
	for _, p := range []string{ProblemMissing, ProblemNoRealServers, ProblemSchedulerMismatch} {
		if len(counts[p]) == 0 {
			continue
		}
		if reason == "" {
			reason = map[string]string{ProblemMissing: ReasonVirtualServerMissing, ProblemNoRealServers: ReasonNoRealServers, ProblemSchedulerMismatch: ReasonSchedulerMismatch}[p]
		}
		named := counts[p]
		more := ""
		if len(named) > maxNamed {
			// No count: it would change with every Service while the
			// condition stays True (diagnose and the metrics count them).
			more = " and more (ipvs-guard diagnose lists every one)"
			named = named[:maxNamed]
		}
		parts = append(parts, strings.Join(named, "; ")+more)
	}
	return reason, strings.Join(parts, "; ") + " (" + schedNote + ")", c.remediation(counts, sched)
}

// countReadyEndpoints sets ReadyEndpoints on the expected virtual servers
// that exist without real servers, for long enough (the settle grace: a new
// Service has none until its pods are ready and kube-proxy synced), from
// the EndpointSlices of their Services only. Those are the only Services
// whose endpoints change a verdict: a virtual server with real servers is
// fine whatever its endpoints say. When they cannot be read, the counts
// stay 0 and no virtual server is reported for lacking real servers.
func (c *Checker) countReadyEndpoints(ctx context.Context, logger klog.Logger, expected []Expected, svcs []*corev1.Service, table ipvs.Table) {
	empty := map[ipvs.Key]bool{}
	for _, e := range table {
		if len(e.Real) == 0 {
			empty[e.Virtual.Key()] = true
		}
	}
	var keys []string
	var at []int
	for i, e := range expected {
		if empty[e.Key] {
			keys, at = append(keys, e.Key.String()), append(at, i)
		}
	}
	need := map[string]bool{}
	for j, ok := range c.emptySince.Settled(keys) {
		if ok {
			need[expected[at[j]].Service] = true
		}
	}
	// Asked even with no name: a reader that keeps answers forgets the
	// Services no longer asked for, so one that gets real servers and loses
	// them again is read afresh. No name costs no request.
	names := slices.Sorted(maps.Keys(need))
	eps, err := c.cfg.Cluster.EndpointSlices(ctx, names)
	if len(names) == 0 {
		return
	}
	if err != nil {
		logger.Info("Cannot read the EndpointSlices of Services whose virtual servers have no real servers; not judging those", "services", len(names), "err", err)
		return
	}
	var some []*corev1.Service
	for _, s := range svcs {
		if need[s.Namespace+"/"+s.Name] {
			some = append(some, s)
		}
	}
	type vip struct {
		service string
		key     ipvs.Key
	}
	ready := map[vip]int{}
	for _, e := range ExpectedVirtualServers(some, eps, c.cfg.NodeName) {
		ready[vip{e.Service, e.Key}] = e.ReadyEndpoints
	}
	for _, i := range at {
		if n, ok := ready[vip{expected[i].Service, expected[i].Key}]; ok {
			expected[i].ReadyEndpoints = n
		}
	}
}

// settled drops the findings that have not persisted for the settle grace.
func (c *Checker) settled(logger klog.Logger, findings []Finding) []Finding {
	out := check.KeepSettled(c.cfg.Settle, findings, Finding.String)
	if held := len(findings) - len(out); held > 0 {
		logger.V(2).Info("Holding back new findings until they persist (kube-proxy may not have synced yet)", "held", held, "grace", c.cfg.Settle.Grace)
	}
	return out
}

func (c *Checker) proxyMode(ctx context.Context) (string, bool) {
	if c.cfg.KubeProxy == nil {
		return "", false
	}
	m, err := c.cfg.KubeProxy.ProxyMode(ctx)
	return m, err == nil
}

func (c *Checker) remediation(counts map[string][]string, sched string) []check.Step {
	var out []check.Step
	if len(counts[ProblemMissing]) > 0 || len(counts[ProblemNoRealServers]) > 0 {
		out = append(out, check.Steps(
			"kube-proxy on this node has not programmed these Services: read its log (kubectl -n kube-system logs <kube-proxy pod on this node>, or journalctl on RKE2/RKE1) for sync errors, and check that the IPVS scheduler module ip_vs_"+sched+" is loaded (modules check)",
			"once the cause is fixed, restart kube-proxy on this node so it resyncs every Service")...)
	}
	if len(counts[ProblemSchedulerMismatch]) > 0 {
		out = append(out, check.Step{"virtual servers use another scheduler than " + sched + " (kube-proxy's configuration, or a manual ipvsadm change): set the scheduler kube-proxy should use, then restart it:"})
		out = append(out, c.cfg.Distro.KubeProxyRemediation(distro.KubeProxySettings{Scheduler: sched, StrictARP: true})...)
	}
	return out
}

// onlyFamilies drops expectations of an IP family the table has no virtual
// server of at all while it has some of the other family (a single-stack
// kube-proxy on a dual-stack cluster). An empty table keeps everything.
func onlyFamilies(exp []Expected, t ipvs.Table) []Expected {
	has4, has6 := false, false
	for _, e := range t {
		if e.Virtual.FWMark != 0 {
			continue
		}
		if e.Virtual.Address.Is4() {
			has4 = true
		} else {
			has6 = true
		}
	}
	if !has4 && !has6 {
		return exp
	}
	out := exp[:0:0]
	for _, e := range exp {
		if (e.Key.Address.Is4() && has4) || (e.Key.Address.Is6() && has6) {
			out = append(out, e)
		}
	}
	return out
}

// moduleNotLoaded reports an absent ip_vs: a problem when this node is set
// up for IPVS (kube-proxy reports ipvs mode, or kube-ipvs0 exists, which
// only kube-proxy's IPVS mode creates); otherwise there is simply no table to
// look at, and the modules check reports the module.
// noTable says why there is no IPVS table, the same whatever found it.
const noTable = "ip_vs is not loaded (or the kernel has no IPVS netlink family)"

func (c *Checker) moduleNotLoaded(ctx context.Context, cause error) (check.Result, error) {
	mode, modeKnown := c.proxyMode(ctx)
	link, err := c.cfg.ReadLink(kubeproxy.DummyInterface)
	if err != nil {
		return check.Result{}, err
	}
	if modeKnown && mode != kubeproxy.ModeIPVS {
		return check.Skipped(c.Name(), ReasonNotIPVSMode, fmt.Sprintf("ip_vs is not loaded and kube-proxy runs in %s mode: no IPVS table to inspect", mode)), nil
	}
	// One wording for every way the table is absent (ip_vs not listed, or
	// listed with no IPVS netlink family registered): the cause's own text
	// varies with how it was found, and a message that changes with nothing
	// changed on the node is a Node write on every resync.
	klog.FromContext(ctx).V(2).Info("No IPVS table", "check", check.NameIPVS, "cause", cause)
	if !modeKnown && !link.Exists {
		return check.Skipped(c.Name(), ReasonModuleNotLoaded, noTable+": no IPVS table to inspect (kube-proxy is not reachable and kube-ipvs0 does not exist; the modules check reports the module)"), nil
	}
	why := "kube-proxy runs in IPVS mode"
	if !modeKnown {
		why = "kube-ipvs0 exists, so kube-proxy ran in IPVS mode here"
	}
	return check.Result{
		Name:        c.Name(),
		Status:      check.StatusProblem,
		Reason:      ReasonModuleNotLoaded,
		Message:     fmt.Sprintf("%s, so there is no IPVS table, but %s: no Service VIP is balanced on this node (see the modules check)", noTable, why),
		Remediation: check.Steps("load and persist the IPVS modules (ipvs-guard diagnose --fix, or the modules check's remediation), then restart kube-proxy on this node"),
	}, nil
}

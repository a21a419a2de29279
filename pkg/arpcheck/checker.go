// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// Condition reasons of the arp check (stable, UpperCamelCase).
const (
	// ReasonAnswered means every probed IP was answered by exactly one expected MAC.
	ReasonAnswered = "ARPAnswered"
	// ReasonNoReply means at least one IP got no reply (and none conflicts or has the wrong responder).
	ReasonNoReply = "ARPNoReply"
	// ReasonConflict means at least one IP is answered by several MACs.
	ReasonConflict = "ARPConflict"
	// ReasonWrongResponder means at least one IP is answered by a MAC that is not the announcer's (and none conflicts).
	ReasonWrongResponder = "ARPWrongResponder"
	// ReasonOtherInterface means at least one IP is answered by the
	// announcing node's MAC of an interface MetalLB does not announce it on
	// (and none conflicts or has the wrong responder).
	ReasonOtherInterface = "ARPReplyFromOtherInterface"
	// ReasonDownInterface means at least one IP is answered with the MAC of
	// a down interface of the announcing node (and none conflicts or has the
	// wrong responder).
	ReasonDownInterface = "ARPReplyFromDownInterface"
	// ReasonNoTargets means there was nothing to probe.
	ReasonNoTargets = "NoTargets"
)

// Target is one IP to probe and what is known about who should answer.
type Target struct {
	// IP is the address to probe: IPv4 (ARP) or IPv6 (NDP).
	IP netip.Addr
	// Interface, when set, forces the egress interface; otherwise a route lookup picks it.
	Interface string
	// ExpectedMACs, when set, are the only MACs allowed to answer (the
	// announcing node's interface MACs); a single other MAC is wrong-responder.
	ExpectedMACs []net.HardwareAddr
	// ExpectedNode names the announcing node (MetalLB's ServiceL2Status). It
	// appears in messages. Without ExpectedMACs, the Directory's MACs of
	// that node are the expected ones once a reply came; when the node
	// published none, a single responder the Directory attributes to another
	// node is wrong-responder.
	ExpectedNode string
	// Service is the Service (namespace/name) owning the IP, for messages.
	Service string
	// Unannounced, when set, says why no node announces the IP (from
	// MetalLB's state); a no-reply finding's message carries it.
	Unannounced string
	// ExpectedInterfaces, when set, are the interfaces of ExpectedNode
	// MetalLB announces the IP on (ServiceL2Status); a reply with the MAC
	// of another of that node's interfaces is reply-from-other-interface.
	ExpectedInterfaces []string
	// Explain, when set, is asked why the IP is not answered once a probe
	// found it unanswered (never before: it may read the API): cause is a
	// stable UpperCamelCase name, message names the object to fix and
	// replaces Unannounced. Empty strings: nothing known.
	Explain func(ctx context.Context) (cause, message string)
}

// TargetSource returns the targets of one check run. The agent builds it
// from its informers; diagnose from --probe-ip.
type TargetSource func(ctx context.Context) ([]Target, error)

// StaticTargets returns a TargetSource that always yields targets.
func StaticTargets(targets ...Target) TargetSource {
	return func(context.Context) ([]Target, error) { return targets, nil }
}

// ParseTargets turns IP strings (each may be comma-separated) into targets
// probed on iface (empty: chosen by route lookup). IPv4 and IPv6 addresses
// are both accepted (IPv4-mapped IPv6 ones are IPv4); zones are not, since
// the interface is chosen by route lookup or iface. An address no single
// host answers address resolution for (unspecified, loopback, multicast,
// the IPv4 broadcast) is refused with ErrUnprobeable, before anything is
// read or sent.
func ParseTargets(ips []string, iface string) ([]Target, error) {
	var out []Target
	for _, s := range ips {
		for _, f := range strings.Split(s, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			ip, err := netip.ParseAddr(f)
			if err != nil || ip.Zone() != "" {
				return nil, fmt.Errorf("parsing probe IP %q: not an IPv4 or IPv6 address", f)
			}
			if err := checkUnicast(ip.Unmap()); err != nil {
				return nil, err
			}
			out = append(out, Target{IP: ip.Unmap(), Interface: iface})
		}
	}
	return out, nil
}

// Directory names the nodes behind MACs, from the MACs each agent publishes
// on its Node. The checker asks it only about IPs that answered, and lets it
// read the API (lookup, fresh) only where the verdict depends on it, so its
// cost is bounded by the IPs probed and by problems, not by the number of
// nodes.
type Directory interface {
	// NodeMACs returns the MACs node published (none when unknown); fresh
	// asks to re-read them, because a reply came from a MAC not among them.
	NodeMACs(ctx context.Context, node string, fresh bool) []net.HardwareAddr
	// NodeForMAC names the node that published mac. With lookup it may read
	// the API for a MAC it does not know; without, it answers from what it
	// has read.
	NodeForMAC(ctx context.Context, mac net.HardwareAddr, lookup bool) (node string, ok bool)
}

// InterfaceDirectory is a Directory that also names the interface behind a
// MAC and whether it is down, from what each node published.
type InterfaceDirectory interface {
	Directory
	// InterfaceForMAC names the node and interface that published mac, and
	// whether that interface is down; lookup as for NodeForMAC. A MAC a
	// node publishes on an interface that is up (a VLAN on a down parent,
	// a bond's ports) is not down.
	InterfaceForMAC(ctx context.Context, mac net.HardwareAddr, lookup bool) (node, iface string, down, ok bool)
}

// CheckerOptions configure a Checker.
type CheckerOptions struct {
	// Targets yields the IPs to probe on each run. Required.
	Targets TargetSource
	// Network is the host side; default HostNetwork{} (this network namespace).
	Network Network
	// Probe tunes the probers. A nil Limiter gets one limiter shared by every
	// interface and every run of this checker.
	Probe ProbeOptions
	// Directory, when set, gives the announcers' MACs and names the node
	// owning each responding MAC; one that is an InterfaceDirectory also
	// names the interface, so a reply's way is judged.
	Directory Directory
	// Now is the clock the history of answering MACs is kept by; default
	// time.Now.
	Now func() time.Time
}

// Checker is the arp check (check.NameARP): it probes the targets, one
// socket per egress interface and family (ARP for IPv4, NDP for IPv6), and
// reports a Finding per target. Its fields are set at construction; Run may
// be called repeatedly, not concurrently with itself for the same interfaces
// (each run opens its own sockets).
//
// A run keeps to its context's deadline: it sends no first request later
// than one reply window (and a tenth of its time) before it, so a run
// with more IPs than it has time for still ends in time with the verdicts it
// could reach, never as "interrupted". The IPs it had no time for keep their
// latest verdict and go first in the next run, so every IP is probed within
// a few runs and a slow node converges instead of reporting nothing.
type Checker struct {
	targets TargetSource
	network Network
	probe   ProbeOptions
	dir     Directory
	now     func() time.Time
	hist    *history

	mu       sync.Mutex // guards the fields below
	runs     uint64
	probedIn map[netip.Addr]uint64  // the run that last probed each IP
	last     map[netip.Addr]Finding // each IP's latest verdict
}

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the arp check.
func NewChecker(opts CheckerOptions) (*Checker, error) {
	if opts.Targets == nil {
		return nil, errors.New("creating arp check: no target source")
	}
	if opts.Network == nil {
		opts.Network = HostNetwork{}
	}
	if opts.Probe.Limiter == nil {
		opts.Probe.Limiter = rate.NewLimiter(DefaultRate, DefaultBurst)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Checker{targets: opts.Targets, network: opts.Network, probe: opts.Probe, dir: opts.Directory,
		now: opts.Now, hist: newHistory(),
		probedIn: map[netip.Addr]uint64{}, last: map[netip.Addr]Finding{}}, nil
}

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameARP }

// groupKey names a socket: an egress interface and a family.
type groupKey struct {
	index  int
	family Family
}

// group is the targets sharing one egress interface and family.
type group struct {
	route   Route
	ips     []netip.Addr
	obs     map[netip.Addr]Observation
	targets []int // indexes into the run's targets
}

// Run implements check.Checker. It returns an error (could not check) when
// the targets cannot be listed, a socket cannot be opened or no target has a
// usable route, or when the deadline leaves no time to probe a single IP;
// findings about the IPs are never errors.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameARP)
	start := time.Now()
	targets, err := c.targets(ctx)
	if err != nil {
		return check.Result{}, fmt.Errorf("listing IPs to ARP-probe: %w", err)
	}
	if len(targets) == 0 {
		c.forget(nil)
		return check.Skipped(check.NameARP, ReasonNoTargets, "no LoadBalancer IPs to probe"), nil
	}
	targets = slices.Clone(targets) // the source's slice stays untouched
	for i := range targets {
		targets[i].IP = targets[i].IP.Unmap()
	}
	run, perm := c.startRun(targets)

	cutoff := c.cutoff(ctx, start)
	rctx := ctx
	if !cutoff.IsZero() {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadlineCause(ctx, cutoff, errOutOfTime)
		defer cancel()
	}
	ordered := make([]Target, len(perm))
	for j, i := range perm {
		ordered[j] = targets[i]
	}
	oroutes, orouteErrs := c.routes(rctx, ordered)
	routesTook := time.Since(start)

	order, unprobed, late := groupByRoute(logger, targets, perm, oroutes, orouteErrs)
	if len(order) == 0 && len(unprobed) > 0 {
		return check.Result{}, fmt.Errorf("no IP could be probed: %s", strings.Join(unprobed, "; "))
	}

	if len(order) > 0 {
		if err := c.probeAll(ctx, order, cutoff); err != nil {
			return check.Result{}, err
		}
	}

	findings, probed := c.judge(ctx, targets, order, late)
	carried, never := c.keepLatest(run, targets, findings, probed, late)
	c.forget(targets)
	if carried+never > 0 {
		logger.Info("The ARP check's deadline came before every IP was probed; the rest go first next run",
			"ips", len(targets), "probedNow", len(targets)-carried-never-len(unprobed), "latestVerdictKept", carried, "neverProbed", never, "routeLookups", routesTook, "took", time.Since(start))
	}
	if carried == 0 && never > 0 && !slices.Contains(probed, true) {
		return check.Result{}, fmt.Errorf("no IP could be probed before the check's deadline: %d IP(s), route lookups took %v", never, routesTook.Round(time.Millisecond))
	}

	res, problems := summarize(findings, probed, unprobed, carried, never)
	logger.V(2).Info("ARP/NDP check done", "ips", len(res.Findings), "problems", problems, "unprobed", len(unprobed))
	return res, nil
}

// startRun numbers a run and orders its targets: perm lists their indexes
// with the IPs probed longest ago (or never) first, the ones a run short of
// time leaves out.
func (c *Checker) startRun(targets []Target) (run uint64, perm []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs++
	perm = make([]int, len(targets))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int {
		return cmp.Compare(c.probedIn[targets[a].IP], c.probedIn[targets[b].IP])
	})
	return c.runs, perm
}

// groupByRoute puts the targets (in perm's order, with the route found for
// each: routes[j] is targets[perm[j]]'s) into one group per egress
// interface and family, in the order of their first IP. It returns as well
// the IPs without a usable route, each with why, and which targets the
// route lookups had no time for (late).
func groupByRoute(logger klog.Logger, targets []Target, perm []int, routes []Route, errs []error) (order []*group, unprobed []string, late []bool) {
	groups := map[groupKey]*group{}
	late = make([]bool, len(targets)) // no time to probe it in this run
	for j, i := range perm {
		t, rt, err := targets[i], routes[j], errs[j]
		if errors.Is(err, errOutOfTime) {
			late[i] = true
			continue
		}
		if err != nil {
			logger.V(2).Info("Not probing", "vip", t.IP, "err", err)
			unprobed = append(unprobed, fmt.Sprintf("%s (%v)", t.IP, err))
			continue
		}
		key := groupKey{index: rt.Index, family: FamilyOf(t.IP)}
		g, ok := groups[key]
		if !ok {
			g = &group{route: rt}
			groups[key] = g
			order = append(order, g)
		}
		g.ips = append(g.ips, t.IP)
		g.targets = append(g.targets, i)
	}
	return order, unprobed, late
}

// judge gives the finding of every target the probes observed; one
// without an observation (no request went out before the deadline) is
// marked late.
func (c *Checker) judge(ctx context.Context, targets []Target, order []*group, late []bool) (findings []Finding, probed []bool) {
	findings = make([]Finding, len(targets))
	probed = make([]bool, len(targets))
	now := c.now()
	for _, g := range order {
		for _, i := range g.targets {
			o, ok := g.obs[targets[i].IP]
			if !ok || o.Requests == 0 {
				late[i] = true
				continue
			}
			findings[i] = c.finding(ctx, targets[i], g.route.Interface, o)
			probed[i] = true
			c.follow(ctx, targets[i].IP, now, &findings[i])
		}
	}
	c.hist.sweep(now)
	return findings, probed
}

// follow records a probed IP's verdict in the history of answering MACs,
// and says so when the IP starts flapping or fails over.
func (c *Checker) follow(ctx context.Context, ip netip.Addr, now time.Time, f *Finding) {
	before := c.hist.changes(ip)
	c.hist.observe(ip, now, f)
	logger := klog.FromContext(ctx)
	if fo := f.Failover; fo != nil {
		logger.V(2).Info("The MAC answering for a LoadBalancer IP changed", "vip", f.IP, "service", f.Service,
			"fromMAC", fo.FromMAC, "fromNode", fo.FromNode, "toMAC", fo.ToMAC, "toNode", fo.ToNode, "unanswered", fo.UnansweredSeconds)
	}
	if f.AnnouncerChanges > FlapThreshold && before <= FlapThreshold {
		logger.Info("A LoadBalancer IP keeps changing announcer", "vip", f.IP, "service", f.Service,
			"changesLastHour", f.AnnouncerChanges, "mac", f.MACs, "nodes", f.ResponderNodes)
	}
}

// keepLatest records this run's findings and gives what this run had no
// time for its latest verdict: carried counts those, never the late IPs
// that have none.
func (c *Checker) keepLatest(run uint64, targets []Target, findings []Finding, probed, late []bool) (carried, never int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, t := range targets {
		switch {
		case probed[i]:
			c.probedIn[t.IP] = run
			f := findings[i]
			f.Failover = nil // observed once, in the run that saw it
			c.last[t.IP] = f
		case late[i]:
			if f, ok := c.last[t.IP]; ok {
				findings[i], probed[i] = f, true
				carried++
			} else {
				never++
			}
		}
	}
	return carried, never
}

// summarize builds the result from the findings of the probed targets, the
// IPs not probed (no route) and how many kept their latest verdict
// (carried) or have none yet (never); it also returns how many findings
// are problems.
func summarize(findings []Finding, probed []bool, unprobed []string, carried, never int) (check.Result, int) {
	res := check.Result{Name: check.NameARP, Status: check.StatusOK, Reason: ReasonAnswered}
	var problems []string
	worst := ResultAnswered
	for i, f := range findings {
		if !probed[i] {
			continue
		}
		res.Findings = append(res.Findings, f)
		if f.Result.Problem() {
			problems = append(problems, f.String())
			if severity(f.Result) > severity(worst) {
				worst = f.Result
			}
		}
	}
	if len(problems) == 0 {
		// No count: it changes with every LoadBalancer Service sharded here.
		res.Message = fmt.Sprintf("every IP this node probes answered %s by exactly one MAC", methods(findings, probed, false))
	} else {
		res.Status = check.StatusProblem
		res.Reason = reasonFor(worst)
		res.Message = fmt.Sprintf("%d IP(s) fail %s: %s", len(problems), methods(findings, probed, true), strings.Join(problems, "; "))
		res.Remediation = remediation(findings, probed)
	}
	if len(unprobed) > 0 {
		res.Message += fmt.Sprintf("; not probed: %s", strings.Join(unprobed, "; "))
	}
	// First, so that a message cut to a condition's length still says it.
	switch {
	case never > 0:
		res.Message = "some IPs are not probed yet (this node had no time for them before the check's deadline; the next run probes them first); " + res.Message
	case carried > 0:
		res.Message = "the check's deadline came before every IP was probed in one run (the latest verdict stands for the rest, probed first next run); " + res.Message
	}
	return res, len(problems)
}

// errOutOfTime is the cause of the route lookups' context once the run's
// cutoff for first requests has passed.
var errOutOfTime = errors.New("the ARP check's time ran out before this IP's turn")

// cutoff is when a run started at start sends its last first request: one
// reply window and a tenth of the run's time before ctx's deadline, so the
// round and the result are done before it. Zero (no cutoff: ctx alone
// governs) without a deadline or when the time left is shorter than that.
func (c *Checker) cutoff(ctx context.Context, start time.Time) time.Time {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	cut := dl.Add(-dl.Sub(start) / 10).Add(-c.probe.withDefaults().Window)
	if !cut.After(start) {
		return time.Time{}
	}
	return cut
}

// forget drops what is kept about IPs that are no longer targets.
func (c *Checker) forget(targets []Target) {
	keep := make(map[netip.Addr]bool, len(targets))
	for _, t := range targets {
		keep[t.IP] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ip := range c.last {
		if !keep[ip] {
			delete(c.last, ip)
		}
	}
	for ip := range c.probedIn {
		if !keep[ip] {
			delete(c.probedIn, ip)
		}
	}
}

// routes looks up every target's route, at once when the network can.
func (c *Checker) routes(ctx context.Context, targets []Target) ([]Route, []error) {
	if br, ok := c.network.(BatchRouter); ok {
		return br.Routes(ctx, targets)
	}
	routes := make([]Route, len(targets))
	errs := make([]error, len(targets))
	for i, t := range targets {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("looking up the route to %s: %w", t.IP, context.Cause(ctx))
			continue
		}
		routes[i], errs[i] = c.network.Route(ctx, t.IP, t.Interface)
	}
	return routes, errs
}

// probeAll opens every group's socket first, then probes the groups in
// parallel, none sending a first request after cutoff (zero: no cutoff).
// Sockets are opened on the calling goroutine.
func (c *Checker) probeAll(ctx context.Context, groups []*group, cutoff time.Time) error {
	type opened struct {
		sock  Socket
		dst   net.Addr
		group *group
	}
	var socks []opened
	defer func() {
		for _, s := range socks {
			_ = s.sock.Close()
		}
	}()
	for _, g := range groups {
		sock, dst, err := c.network.Listen(ctx, g.route)
		if err != nil {
			return err
		}
		socks = append(socks, opened{sock: sock, dst: dst, group: g})
	}
	errs := make([]error, len(socks))
	var wg sync.WaitGroup
	for i, s := range socks {
		p, err := NewProber(s.sock, s.dst, s.group.route.Interface, s.group.route.MAC, s.group.route.Src, c.probe)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs, err := p.ProbeUntil(ctx, s.group.ips, cutoff)
			if err != nil {
				errs[i] = err
				return
			}
			s.group.obs = make(map[netip.Addr]Observation, len(obs))
			for _, o := range obs {
				s.group.obs[o.IP] = o
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Checker) finding(ctx context.Context, t Target, iface string, o Observation) Finding {
	expected := t.ExpectedMACs
	if len(expected) == 0 && t.ExpectedNode != "" && c.dir != nil && len(o.MACs) > 0 {
		// Read the announcer's MACs only now that a reply came, and again
		// (rate limited by the directory) when a single reply is not one of them.
		expected = c.dir.NodeMACs(ctx, t.ExpectedNode, false)
		if len(o.MACs) == 1 && !containsMAC(expected, o.MACs[0]) {
			expected = c.dir.NodeMACs(ctx, t.ExpectedNode, true)
		}
	}
	f := Finding{
		IP:           t.IP.String(),
		Family:       FamilyOf(t.IP),
		Interface:    iface,
		Result:       classify(o.MACs, expected),
		MACs:         make([]string, 0, len(o.MACs)),
		RTTSeconds:   o.RTT.Seconds(),
		ExpectedNode: t.ExpectedNode,
		Service:      t.Service,
		Unannounced:  t.Unannounced,
	}
	if f.Result == ResultNoReply && t.Explain != nil {
		if cause, msg := t.Explain(ctx); msg != "" {
			f.Cause, f.Unannounced = cause, msg
		}
	}
	// Sorted, so that a message (and a Node condition) does not change with
	// the order replies happened to arrive in.
	macs := slices.SortedFunc(slices.Values(o.MACs), func(a, b net.HardwareAddr) int { return bytes.Compare(a, b) })
	// Naming a responder may read the API only where it matters: a
	// problem, or a verdict that depends on who answered (the announcer
	// published no MACs). An answered IP is named from what is known.
	lookup := f.Result != ResultAnswered || (len(expected) == 0 && t.ExpectedNode != "")
	known := false
	nodes := make([]string, len(macs))
	for i, m := range macs {
		f.MACs = append(f.MACs, m.String())
		if c.dir != nil {
			if n, ok := c.dir.NodeForMAC(ctx, m, lookup); ok {
				nodes[i], known = n, true
			}
		}
	}
	if known {
		f.ResponderNodes = nodes
	}
	if len(expected) == 0 {
		f.Result = classifyByNode(f.Result, nodes, t.ExpectedNode)
	}
	f.ExpectedInterfaces = t.ExpectedInterfaces
	if len(t.ExpectedMACs) == 0 && len(macs) == 1 {
		f.Result, f.ResponderInterface = c.replyWay(ctx, t, f.Result, macs[0], lookup)
	}
	for _, m := range expected {
		f.ExpectedMACs = append(f.ExpectedMACs, m.String())
	}
	return f
}

// replyWay refines the verdict on a single reply that is the announcing
// node's (by the MACs it published): with the MAC of one of its interfaces
// that is down, or of an interface other than the ones MetalLB announces
// the IP on, the reply does not come the way MetalLB says. It needs a
// Directory that names interfaces; a MAC it cannot place leaves the
// verdict alone.
func (c *Checker) replyWay(ctx context.Context, t Target, r Result, mac net.HardwareAddr, lookup bool) (Result, string) {
	id, ok := c.dir.(InterfaceDirectory)
	if !ok || t.ExpectedNode == "" || (r != ResultAnswered && r != ResultWrongResponder) {
		return r, ""
	}
	node, iface, down, ok := id.InterfaceForMAC(ctx, mac, lookup)
	switch {
	case !ok || node != t.ExpectedNode:
		return r, ""
	case down:
		return ResultDownInterface, iface
	case len(t.ExpectedInterfaces) > 0 && !slices.Contains(t.ExpectedInterfaces, iface):
		return ResultOtherInterface, iface
	default:
		return r, ""
	}
}

// severity orders results for the check's reason: a conflict (clients flap)
// outranks a wrong responder, which outranks silence.
func severity(r Result) int {
	switch r {
	case ResultConflict:
		return 4
	case ResultWrongResponder:
		return 3
	case ResultDownInterface, ResultOtherInterface:
		return 2
	case ResultNoReply:
		return 1
	default:
		return 0
	}
}

func reasonFor(r Result) string {
	switch r {
	case ResultConflict:
		return ReasonConflict
	case ResultWrongResponder:
		return ReasonWrongResponder
	case ResultDownInterface:
		return ReasonDownInterface
	case ResultOtherInterface:
		return ReasonOtherInterface
	case ResultNoReply:
		return ReasonNoReply
	default:
		return ReasonAnswered
	}
}

// methods names how the probed IPs (only the failing ones with
// problemsOnly) were probed, "ARP", "NDP" or "ARP and NDP", so a message
// never lets one family stand for both; it carries no count, which would
// change with every LoadBalancer Service sharded here.
func methods(findings []Finding, probed []bool, problemsOnly bool) string {
	var v4, v6 bool
	for i, f := range findings {
		if !probed[i] || (problemsOnly && !f.Result.Problem()) {
			continue
		}
		v4 = v4 || f.Family == FamilyIPv4
		v6 = v6 || f.Family == FamilyIPv6
	}
	switch {
	case v4 && v6:
		return "ARP and NDP"
	case v6:
		return "NDP"
	default:
		return "ARP"
	}
}

// remediation returns one hint per kind of failure seen.
func remediation(findings []Finding, probed []bool) []check.Step {
	seen := map[Result]bool{}
	conflicts := map[Family]bool{}
	for i, f := range findings {
		if probed[i] {
			seen[f.Result] = true
			conflicts[f.Family] = conflicts[f.Family] || f.Result == ResultConflict
		}
	}
	var out []check.Step
	if conflicts[FamilyIPv6] {
		out = append(out, check.Step{"Several MACs answer neighbour solicitations for one IPv6 address: Linux answers only for addresses on the receiving interface (an IPv6 address on kube-ipvs0 is never answered, strictARP or not), so look for a host with the address configured on its LAN interface, a proxy_ndp entry (ip -6 neigh show proxy) or a second announcer (the MACs are listed above)."})
	}
	if conflicts[FamilyIPv4] {
		out = append(out, check.Step{"Several MACs answer ARP for one IP: enable strictARP in kube-proxy (ipvs.strictARP: true, i.e. net.ipv4.conf.all.arp_ignore=1 and arp_announce=2) so nodes stop answering for addresses on kube-ipvs0, and look for another host statically configured with the address (the MACs are listed above)."})
	}
	if seen[ResultWrongResponder] {
		out = append(out, check.Step{"A MAC other than the announcing node's answers: check which node MetalLB elected (kubectl get servicel2statuses -A) and whether another host holds the address."})
	}
	if seen[ResultDownInterface] {
		out = append(out, check.Step{"The announcing node answers with the MAC of one of its interfaces that is down (ip -br link on that node): MetalLB announces on an interface without link, so clients' frames to that MAC go nowhere. Bring the interface up, or restrict the L2Advertisement's interfaces to the ones with link, and check bonds and VLANs sharing that MAC."})
	}
	if seen[ResultOtherInterface] {
		out = append(out, check.Step{"The announcing node answers with the MAC of an interface other than the one MetalLB announces on (kubectl get servicel2statuses -A -o yaml: status.interfaces): the reply leaves by another way and a router filtering by source may drop it as spoofed. Set arp_ignore/arp_announce (strictARP), check the node's routes to the segment, or, if that interface is the right one, add it to the L2Advertisement's interfaces."})
	}
	if seen[ResultNoReply] {
		out = append(out, check.Step{"Nobody answers ARP (or, for IPv6, neighbour solicitations): check that a MetalLB speaker announces the IP (an L2Advertisement covering its IPAddressPool, a speaker pod running with NET_RAW on a node its node selector allows: kubectl -n metallb-system logs ds/speaker) and that the prober is on the IP's layer-2 segment."})
	}
	return out
}

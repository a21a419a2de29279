// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
)

// Reasons of the kube-proxy-sync check (stable: they become the reasons of
// the KubeProxyDataplaneDegraded Node condition).
const (
	// ReasonSyncStale: kube-proxy has not synced its rules for longer than
	// its own health timeout while an update waits, or it has stopped
	// answering and its last sync is that old.
	ReasonSyncStale = "KubeProxySyncStale"
	// ReasonSyncFailing: kube-proxy's rule transactions (nftables
	// transactions, iptables-restore runs) keep failing and none has
	// succeeded since: its /healthz stays healthy while nothing waits.
	ReasonSyncFailing = "KubeProxySyncFailing"
	// ReasonCleanupFailing: kube-proxy's removal of stale nftables chains
	// failed in two resyncs running.
	ReasonCleanupFailing = "KubeProxyCleanupFailing"
	// ReasonSyncSlow: kube-proxy's full syncs take longer than its sync
	// period.
	ReasonSyncSlow = "KubeProxySyncSlow"
	// ReasonSyncing: kube-proxy syncs its rules within its health timeout
	// and its transactions succeed.
	ReasonSyncing = "KubeProxySyncing"
)

// SyncFinding is what kube-proxy says about its syncing of one IP family.
type SyncFinding struct {
	// IPFamily is kube-proxy's ip_family label (IPv4, IPv6); empty when
	// the sync metrics could not be read (Error says why).
	IPFamily string `json:"ipFamily"`
	// LastSync is when kube-proxy last synced this family's rules.
	LastSync *time.Time `json:"lastSync,omitempty"`
	// LastQueued is when a sync was last queued.
	LastQueued *time.Time `json:"lastQueued,omitempty"`
	// NotSyncedSeconds is how long since LastSync.
	NotSyncedSeconds float64 `json:"notSyncedSeconds"`
	// Pending is true when a sync was queued after the last one.
	Pending bool `json:"pending"`
	// ServiceChangesPending and EndpointChangesPending are kube-proxy's
	// pending change counts (-1: not published).
	ServiceChangesPending  float64 `json:"serviceChangesPending"`
	EndpointChangesPending float64 `json:"endpointChangesPending"`
	// HealthTimeoutSeconds is kube-proxy's health timeout (2 × sync period).
	HealthTimeoutSeconds float64 `json:"healthTimeoutSeconds"`
	// Health is kube-proxy's own verdict on its healthz address: healthy,
	// unhealthy, or why it is unknown.
	Health string `json:"health"`
	// Stale is the verdict: an update waits longer than the health timeout.
	Stale bool `json:"stale"`
	// JudgedBy says what decided Stale: healthz, metrics, or silence (kube-proxy
	// stopped answering).
	JudgedBy string `json:"judgedBy,omitempty"`
	// Error is why the sync metrics could not be read.
	Error string `json:"error,omitempty"`
	// Note says what of kube-proxy's configuration was not taken as given
	// (a sync period that is not a duration, a healthz address that is no
	// address of this node) and what was used instead.
	Note string `json:"note,omitempty"`
	// Mode is the mode kube-proxy runs in.
	Mode string `json:"mode,omitempty"`
	// SyncPeriodSeconds is the mode's sync period.
	SyncPeriodSeconds float64 `json:"syncPeriodSeconds,omitempty"`
	// TxFailures and CleanupFailures are kube-proxy's failure counters
	// (nftables transactions or iptables-restore runs; stale-chain removals).
	TxFailures      float64 `json:"txFailures"`
	CleanupFailures float64 `json:"cleanupFailures"`
	// Failing is true when transactions failed since the previous read and
	// none succeeded since.
	Failing bool `json:"failing"`
	// CleanupFailing is true when stale-chain removals failed in two
	// consecutive reads.
	CleanupFailing bool `json:"cleanupFailing"`
	// FullSyncSeconds is the mean duration of the full syncs seen since the
	// previous read (or since kube-proxy started, on the first read); 0
	// when none.
	FullSyncSeconds float64 `json:"fullSyncSeconds,omitempty"`
	// Slow is true when full syncs take longer than the sync period.
	Slow bool `json:"slow"`
}

// String renders the finding as one line.
func (f SyncFinding) String() string {
	if f.IPFamily == "" {
		return "kube-proxy sync freshness unknown: " + f.Error
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kube-proxy %s rules", f.IPFamily)
	if f.LastSync != nil {
		fmt.Fprintf(&b, " last synced %s (%s ago)", f.LastSync.Format(time.RFC3339), roundDur(f.NotSyncedSeconds))
	} else {
		b.WriteString(" never synced")
	}
	if f.Pending && f.LastQueued != nil {
		fmt.Fprintf(&b, ", an update queued %s waits", f.LastQueued.Format(time.RFC3339))
	} else {
		b.WriteString(", nothing waits")
	}
	if f.ServiceChangesPending >= 0 && f.EndpointChangesPending >= 0 {
		fmt.Fprintf(&b, " (%g Service, %g endpoint changes pending)", f.ServiceChangesPending, f.EndpointChangesPending)
	}
	fmt.Fprintf(&b, "; health timeout %s, healthz %s", roundDur(f.HealthTimeoutSeconds), f.Health)
	if f.Note != "" {
		fmt.Fprintf(&b, " (%s)", f.Note)
	}
	if f.TxFailures > 0 || f.CleanupFailures > 0 {
		fmt.Fprintf(&b, "; %g failed transaction(s), %g failed cleanup(s) since it started", f.TxFailures, f.CleanupFailures)
	}
	if f.FullSyncSeconds > 0 {
		fmt.Fprintf(&b, "; full syncs take %s on average", time.Duration(f.FullSyncSeconds*float64(time.Second)).Round(time.Millisecond))
	}
	if f.Stale {
		fmt.Fprintf(&b, ": STALE (by %s)", f.JudgedBy)
	}
	if f.Failing {
		b.WriteString(": FAILING")
	}
	if f.CleanupFailing {
		b.WriteString(": CLEANUP FAILING")
	}
	if f.Slow {
		b.WriteString(": SLOW")
	}
	return b.String()
}

// State implements check.Finding: the sync timestamps of one family.
func (f SyncFinding) State() check.State {
	if f.IPFamily == "" {
		return check.State{}
	}
	st := &check.KubeProxySyncState{IPFamily: f.IPFamily, HealthTimeoutSeconds: f.HealthTimeoutSeconds, Stale: f.Stale}
	if f.LastSync != nil {
		st.LastSyncSeconds = float64(f.LastSync.UnixNano()) / 1e9
	}
	if f.LastQueued != nil {
		st.LastQueuedSeconds = float64(f.LastQueued.UnixNano()) / 1e9
	}
	return check.State{KubeProxySync: st}
}

func roundDur(sec float64) time.Duration {
	return time.Duration(sec * float64(time.Second)).Round(time.Second)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// freshness remembers, between runs, what the sync judgement needs: the last
// sync times read while kube-proxy answered (to judge a kube-proxy that
// stops answering), the counters of the previous read (failures and full
// syncs rise between reads), how long a stall was when first seen (so the
// condition message stays the same while it lasts) and the healthz client.
type freshness struct {
	mu       sync.Mutex
	healthz  *Client
	timeout  time.Duration
	mode     string
	lastSync map[string]time.Time // per family, from the last good read
	answered time.Time            // when kube-proxy last answered
	// silentAt is when a run last found kube-proxy accepting connections
	// but not answering (stopped, hung, its VM paused).
	silentAt time.Time
	detected map[string]time.Duration
	prev     map[string]prevRead // per family, the previous read
}

// prevRead is one family's counters at the previous read, and what they
// decided then.
type prevRead struct {
	at             time.Time
	sync           FamilySync
	cleanupRose    bool
	slow           bool
	fullSyncSecond float64
}

// healthzClient returns the client for addr, kept while addr is the same.
func (fr *freshness) healthzClient(addr string, timeout time.Duration) *Client {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.healthz == nil || fr.healthz.Address() != addr {
		fr.healthz = NewClient(addr, timeout)
	}
	return fr.healthz
}

// detectedAt returns how long the stall keyed by key was when first seen
// (d now, if this is the first time), and forgets every other stall.
func (fr *freshness) detectedAt(keys map[string]time.Duration) map[string]time.Duration {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	next := make(map[string]time.Duration, len(keys))
	for k, d := range keys {
		if old, ok := fr.detected[k]; ok {
			d = old
		}
		next[k] = d
	}
	fr.detected = next
	return next
}

func (fr *freshness) remember(now time.Time, mode string, timeout time.Duration, v []SyncVerdict) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.timeout, fr.answered, fr.mode = timeout, now, mode
	fr.lastSync = map[string]time.Time{}
	for _, s := range v {
		fr.lastSync[s.Family] = s.Sync.LastSync
	}
}

func (fr *freshness) forget() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.lastSync, fr.answered, fr.detected, fr.prev = nil, time.Time{}, nil, nil
}

// counters judges one family's failure counters and full syncs against the
// previous read, and remembers this one:
//
//   - failing: transactions failed since the previous read and no sync
//     succeeded since it (a failure kube-proxy retried with success is no
//     problem; kube-proxy retries a failed sync every sync period);
//   - cleanup failing: stale-chain removals failed since the previous read
//     and since the one before (a single failure is retried at the next sync);
//   - slow: the full syncs seen since the previous read took longer than the
//     sync period on average (on the first read, every full sync since
//     kube-proxy started); with no full sync since, the last verdict stands.
//     Full syncs seen across a silence (a run found kube-proxy not
//     answering since the previous read) are no measure: a sync that was
//     stopped with its process counts the stop; the last verdict stands.
func (fr *freshness) counters(now time.Time, fam string, cur FamilySync, period time.Duration) (failing, cleanup, slow bool, fullSync float64) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.prev == nil {
		fr.prev = map[string]prevRead{}
	}
	p, ok := fr.prev[fam]
	next := prevRead{at: now, sync: cur}
	switch {
	case !ok:
		if cur.FullSyncs > 0 {
			fullSync = cur.FullSyncSeconds / cur.FullSyncs
			slow = fullSync > period.Seconds()
		}
	case cur.TxFailures < p.sync.TxFailures || cur.FullSyncs < p.sync.FullSyncs:
		// kube-proxy restarted: its counters began again.
		if cur.FullSyncs > 0 {
			fullSync = cur.FullSyncSeconds / cur.FullSyncs
			slow = fullSync > period.Seconds()
		}
	default:
		failing = cur.TxFailures > p.sync.TxFailures && !cur.LastSync.After(p.at)
		next.cleanupRose = cur.CleanupFailures > p.sync.CleanupFailures
		cleanup = next.cleanupRose && p.cleanupRose
		if n := cur.FullSyncs - p.sync.FullSyncs; n > 0 && !fr.silentAt.After(p.at) {
			fullSync = (cur.FullSyncSeconds - p.sync.FullSyncSeconds) / n
			slow = fullSync > period.Seconds()
		} else {
			fullSync, slow = p.fullSyncSecond, p.slow
		}
	}
	next.slow, next.fullSyncSecond = slow, fullSync
	fr.prev[fam] = next
	return failing, cleanup, slow, fullSync
}

// SyncCheckerConfig builds the kube-proxy-sync checker.
type SyncCheckerConfig struct {
	// Client reads kube-proxy's metrics port.
	Client *Client
	// Now is the clock sync freshness is judged by (nil: time.Now).
	Now func() time.Time
	// Distro words the remediation.
	Distro distro.Distro
	// IsLocalAddr reports whether an address is one of this node's, where
	// kube-proxy's health may be read (nil: the node's interfaces).
	IsLocalAddr func(netip.Addr) bool
}

// SyncChecker is the kube-proxy-sync check: kube-proxy's health in every
// proxy mode (docs/design.md "kube-proxy's sync freshness"). It judges
// kube-proxy's sync freshness from its /metrics and /livez with the running
// mode's sync period, its failure counters (transactions, stale-chain
// cleanups) and its full syncs' duration, and remembers between runs what it
// read, so a kube-proxy that stops answering, and counters that rise, are
// judged too.
type SyncChecker struct {
	cfg   SyncCheckerConfig
	fresh freshness
}

var _ check.Checker = (*SyncChecker)(nil)

// NewSyncChecker returns the kube-proxy-sync checker.
func NewSyncChecker(cfg SyncCheckerConfig) (*SyncChecker, error) {
	if cfg.Client == nil {
		return nil, errors.New("kube-proxy-sync checker: Client is required")
	}
	return &SyncChecker{cfg: cfg}, nil
}

// Name implements check.Checker.
func (c *SyncChecker) Name() string { return check.NameKubeProxySync }

func (c *SyncChecker) now() time.Time {
	if c.cfg.Now != nil {
		return c.cfg.Now()
	}
	return time.Now()
}

// restart is the remediation of every kube-proxy-sync problem, worded for
// this node's distribution.
func (c *SyncChecker) restart() []check.Step {
	return []check.Step{c.cfg.Distro.KubeProxyRestart("read its log for the sync that hangs or fails")}
}

// Run implements check.Checker.
func (c *SyncChecker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameKubeProxySync)
	mode, err := c.cfg.Client.ProxyMode(ctx)
	if errors.Is(err, ErrUnreachable) {
		c.fresh.forget()
		return check.Skipped(c.Name(), ReasonUnreachable, fmt.Sprintf(
			"kube-proxy's metrics port %s refuses connections (kube-proxy is not running on this node, is restarting, or serves elsewhere: set --kube-proxy-metrics-address)", c.cfg.Client.Address())), nil
	}
	if err != nil {
		if res := c.silentStall(ctx, err); res != nil {
			return *res, nil
		}
		return check.Result{}, fmt.Errorf("reading kube-proxy's mode: %w", err)
	}
	cfg, cfgErr := c.cfg.Client.Configz(ctx)
	if cfgErr != nil {
		logger.V(2).Info("kube-proxy /configz unavailable", "err", cfgErr)
	}
	body, metricsErr := c.cfg.Client.Metrics(ctx)
	findings, problems := c.syncResult(ctx, mode, cfg, cfgErr, body, metricsErr)
	res := check.Result{Name: c.Name(), Findings: findings}
	if len(problems) == 0 {
		res.Status, res.Reason = check.StatusOK, ReasonSyncing
		period := DefaultSyncPeriod
		if cfgErr == nil {
			period = cfg.SyncPeriodFor(mode)
		}
		res.Message = fmt.Sprintf("kube-proxy (%s mode) syncs its rules within its health timeout of %s", mode, 2*period)
		return res, nil
	}
	res.Status, res.Reason = check.StatusProblem, problems[0].reason
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		msgs = append(msgs, p.message)
	}
	res.Message = strings.Join(msgs, "; ") + " (restart kube-proxy on this node and read its log)"
	res.Remediation = c.restart()
	return res, nil
}

// syncProblem is one verdict of the kube-proxy-sync check.
type syncProblem struct{ reason, message string }

// rulesOf names what kube-proxy programs in mode, for messages.
func rulesOf(mode string) string {
	switch mode {
	case ModeIPVS:
		return "the IPVS table"
	case ModeNFTables:
		return "its nftables table"
	case ModeIPTables:
		return "its iptables rules"
	}
	return "its rules"
}

// transactionsOf names kube-proxy's rule transactions in mode, for messages.
func transactionsOf(mode string) string {
	switch mode {
	case ModeNFTables:
		return "nftables transactions"
	case ModeIPTables:
		return "iptables-restore runs"
	}
	return "rule syncs"
}

// syncResult reads kube-proxy's sync metrics and health and judges them.
// It returns the findings and the problems, worst first: stale, failing,
// cleanup failing, slow.
func (c *SyncChecker) syncResult(ctx context.Context, mode string, cfg Config, cfgErr error, body []byte, err error) ([]check.Finding, []syncProblem) {
	logger := klog.FromContext(ctx)
	now := c.now()
	period := DefaultSyncPeriod
	addr := Config{}.HealthzAddress()
	var notes []string
	if cfgErr == nil {
		var addrNote string
		period = cfg.SyncPeriodFor(mode)
		addr, addrNote = cfg.HealthzTarget(c.cfg.IsLocalAddr)
		for _, n := range []string{cfg.HealthTimeoutNote(), addrNote} {
			if n != "" {
				notes = append(notes, n)
			}
		}
	}
	note := strings.Join(notes, "; ")
	timeout := 2 * period
	var m SyncMetrics
	if err == nil {
		m, err = ParseSyncMetricsContext(ctx, bytes.NewReader(body))
	}
	if err != nil {
		logger.V(2).Info("kube-proxy sync metrics unavailable", "err", err)
		c.fresh.forget()
		return []check.Finding{SyncFinding{Error: err.Error(), Mode: mode, HealthTimeoutSeconds: timeout.Seconds(), SyncPeriodSeconds: period.Seconds(), Note: note}}, nil
	}
	c.fresh.mu.Lock()
	if c.fresh.mode != mode {
		// Another proxier: its counters are not the ones read before.
		c.fresh.prev = nil
	}
	c.fresh.mu.Unlock()
	health, hErr := c.health(ctx, addr)
	hs := "healthy"
	switch {
	case hErr != nil:
		hs = "unknown (" + hErr.Error() + ")"
	case health.Code != http.StatusOK:
		hs = "unhealthy"
	}
	verdicts := JudgeSync(now, timeout, m, health)
	var findings []check.Finding
	stalls := map[string]time.Duration{}
	var failing, cleanup, slow []string
	for _, v := range verdicts {
		f := SyncFinding{IPFamily: v.Family, LastSync: timePtr(v.Sync.LastSync), LastQueued: timePtr(v.Sync.LastQueued),
			NotSyncedSeconds: v.NotSynced.Seconds(), Pending: v.Sync.Pending(), ServiceChangesPending: m.ServiceChangesPending,
			EndpointChangesPending: m.EndpointChangesPending, HealthTimeoutSeconds: timeout.Seconds(), Health: hs, Stale: v.Stale,
			Mode: mode, SyncPeriodSeconds: period.Seconds(), TxFailures: v.Sync.TxFailures, CleanupFailures: v.Sync.CleanupFailures, Note: note}
		if ph, ok := healthOf(health, v.Family); ok {
			f.Health = map[bool]string{true: "healthy", false: "unhealthy"}[ph.Healthy]
		}
		if v.Stale {
			f.JudgedBy = v.By
			stalls[v.Family+"@"+v.Sync.LastSync.Format(time.RFC3339Nano)] = v.NotSynced
		}
		f.Failing, f.CleanupFailing, f.Slow, f.FullSyncSeconds = c.fresh.counters(now, v.Family, v.Sync, period)
		if f.Failing {
			since := "it started"
			if !v.Sync.LastSync.IsZero() {
				since = v.Sync.LastSync.Format(time.RFC3339)
			}
			failing = append(failing, fmt.Sprintf("%s (none succeeded since %s)", v.Family, since))
		}
		if f.CleanupFailing {
			cleanup = append(cleanup, v.Family)
		}
		if f.Slow {
			slow = append(slow, v.Family)
		}
		findings = append(findings, f)
	}
	c.fresh.remember(now, mode, timeout, verdicts)
	detected := c.fresh.detectedAt(stalls)
	var parts []string
	for _, v := range verdicts {
		if !v.Stale {
			continue
		}
		d := detected[v.Family+"@"+v.Sync.LastSync.Format(time.RFC3339Nano)]
		since := "it started"
		if !v.Sync.LastSync.IsZero() {
			since = v.Sync.LastSync.Format(time.RFC3339)
		}
		parts = append(parts, fmt.Sprintf("%s rules not synced since %s (%s when detected; kube-proxy's %s says an update has waited longer than its health timeout of %s)",
			v.Family, since, d.Round(time.Second), map[string]string{"healthz": "own /livez", "metrics": "/metrics"}[v.By], timeout))
	}
	var problems []syncProblem
	if len(parts) > 0 {
		problems = append(problems, syncProblem{ReasonSyncStale, fmt.Sprintf("kube-proxy runs in %s mode but has stopped programming it: %s: Services and endpoints changed since are not in %s",
			mode, strings.Join(parts, "; "), rulesOf(mode))})
	}
	if len(failing) > 0 {
		problems = append(problems, syncProblem{ReasonSyncFailing, fmt.Sprintf("kube-proxy's %s keep failing for %s while its /healthz ignores it: Services and endpoints changed since are not in %s",
			transactionsOf(mode), strings.Join(failing, ", "), rulesOf(mode))})
	}
	if len(cleanup) > 0 {
		problems = append(problems, syncProblem{ReasonCleanupFailing, fmt.Sprintf("kube-proxy's removal of stale nftables chains keeps failing for %s: removed Services' chains stay in %s",
			strings.Join(cleanup, ", "), rulesOf(mode))})
	}
	if len(slow) > 0 {
		problems = append(problems, syncProblem{ReasonSyncSlow, fmt.Sprintf("kube-proxy's full syncs of %s take longer than its sync period of %s: changes wait for them",
			strings.Join(slow, ", "), period)})
	}
	return findings, problems
}

// health asks kube-proxy's /livez (its sync verdict without the node's
// eligibility), or /healthz when /livez is absent (before Kubernetes 1.28).
func (c *SyncChecker) health(ctx context.Context, addr string) (*ProxyHealth, error) {
	hc := c.fresh.healthzClient(addr, c.cfg.Client.timeout)
	h, err := hc.Health(ctx, "/livez")
	if err != nil && strings.Contains(err.Error(), "HTTP 404") {
		h, err = hc.Health(ctx, "/healthz")
	}
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// silentStall judges a kube-proxy that accepts connections but no longer
// answers (stopped, hung): when it last answered and the oldest of its
// families' last syncs is older than its health timeout, its rules are
// stale whatever changed since. Nil when it cannot say.
func (c *SyncChecker) silentStall(ctx context.Context, err error) *check.Result {
	if ctx.Err() != nil || !silent(err) {
		return nil
	}
	now := c.now()
	fr := &c.fresh
	fr.mu.Lock()
	fr.silentAt = now
	answered, timeout, mode := fr.answered, fr.timeout, fr.mode
	var oldest time.Time
	var fams []string
	last := make(map[string]time.Time, len(fr.lastSync))
	for f, t := range fr.lastSync {
		if t.IsZero() {
			// A family that had not synced yet when kube-proxy last
			// answered gives no time to judge by; the others do.
			continue
		}
		fams = append(fams, f)
		last[f] = t
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	fr.mu.Unlock()
	if answered.IsZero() || oldest.IsZero() || now.Sub(oldest) < timeout {
		return nil
	}
	// In IPVS mode kube-proxy resyncs every family every sync period, so a
	// last sync a timeout old is a stall. In nftables and iptables mode
	// (kube-proxy 1.37.1's runner: maxInterval proxyutil.FullSyncPeriod, an
	// hour) a family syncs only when something changes: an idle one (IPv6
	// in an IPv4-only cluster) has synced last at kube-proxy's start, and a
	// single request that timed out would read as a stall. There the
	// silence itself must last the health timeout.
	if mode != ModeIPVS && now.Sub(answered) < timeout {
		return nil
	}
	key := "silent@" + oldest.Format(time.RFC3339Nano)
	d := fr.detectedAt(map[string]time.Duration{key: now.Sub(oldest)})[key]
	var findings []check.Finding
	for _, f := range sortedStrings(fams) {
		t := last[f]
		findings = append(findings, SyncFinding{IPFamily: f, LastSync: timePtr(t), NotSyncedSeconds: now.Sub(t).Seconds(),
			ServiceChangesPending: -1, EndpointChangesPending: -1, HealthTimeoutSeconds: timeout.Seconds(),
			Health: "not answering", Stale: true, JudgedBy: "silence", Mode: mode})
	}
	return &check.Result{Name: c.Name(), Status: check.StatusProblem, Reason: ReasonSyncStale, Findings: findings,
		Message: fmt.Sprintf("kube-proxy accepts connections on %s but has not answered since %s (stopped or hung) and has not synced %s rules since %s (%s when detected), longer than its health timeout of %s: Services and endpoints changed since are not in %s (restart kube-proxy on this node and read its log)",
			c.cfg.Client.Address(), answered.UTC().Format(time.RFC3339), mode, oldest.UTC().Format(time.RFC3339), d.Round(time.Second), timeout, rulesOf(mode)),
		Remediation: c.restart()}
}

// silent reports whether err is a request that timed out (or was not sent
// because one did moments ago): the port accepts connections, nothing answers.
func silent(err error) bool {
	if errors.Is(err, ErrNotAnswering) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

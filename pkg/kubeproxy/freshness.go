// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// ReasonSyncStale: kube-proxy runs in IPVS mode but has not synced its rules
// for longer than its own health timeout while an update waits, or it has
// stopped answering and its last sync is that old.
const ReasonSyncStale = "KubeProxySyncStale"

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
	if f.Stale {
		fmt.Fprintf(&b, ": STALE (by %s)", f.JudgedBy)
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
// sync times read while kube-proxy answered in IPVS mode (to judge a
// kube-proxy that stops answering), how long a stall was when first seen
// (so the condition message stays the same while it lasts) and the healthz
// client.
type freshness struct {
	mu       sync.Mutex
	healthz  *Client
	timeout  time.Duration
	lastSync map[string]time.Time // per family, from the last good read
	answered time.Time            // when kube-proxy last answered in IPVS mode
	detected map[string]time.Duration
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

func (fr *freshness) remember(now time.Time, timeout time.Duration, v []SyncVerdict) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.timeout, fr.answered = timeout, now
	fr.lastSync = map[string]time.Time{}
	for _, s := range v {
		fr.lastSync[s.Family] = s.Sync.LastSync
	}
}

func (fr *freshness) forget() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.lastSync, fr.answered, fr.detected = nil, time.Time{}, nil
}

// syncResult reads kube-proxy's sync metrics and health and judges them.
// It returns the findings and, when a family is stale, the message.
func (c *Checker) syncResult(ctx context.Context, cfg Config, cfgErr error, body []byte, err error) ([]check.Finding, string) {
	logger := klog.FromContext(ctx)
	now := c.now()
	timeout := DefaultSyncPeriod * 2
	addr := Config{}.HealthzAddress()
	var notes []string
	if cfgErr == nil {
		var addrNote string
		timeout = cfg.HealthTimeout()
		addr, addrNote = cfg.HealthzTarget(c.cfg.IsLocalAddr)
		for _, n := range []string{cfg.HealthTimeoutNote(), addrNote} {
			if n != "" {
				notes = append(notes, n)
			}
		}
	}
	note := strings.Join(notes, "; ")
	var m SyncMetrics
	if err == nil {
		m, err = ParseSyncMetricsContext(ctx, bytes.NewReader(body))
	}
	if err != nil {
		logger.V(2).Info("kube-proxy sync metrics unavailable", "err", err)
		c.fresh.forget()
		return []check.Finding{SyncFinding{Error: err.Error(), HealthTimeoutSeconds: timeout.Seconds(), Note: note}}, ""
	}
	health, hErr := c.health(ctx, addr)
	hs := "healthy"
	switch {
	case hErr != nil:
		hs = "unknown (" + hErr.Error() + ")"
	case health.Code != http.StatusOK:
		hs = "unhealthy"
	}
	verdicts := JudgeSync(now, timeout, m, health)
	c.fresh.remember(now, timeout, verdicts)
	var findings []check.Finding
	stalls := map[string]time.Duration{}
	for _, v := range verdicts {
		f := SyncFinding{IPFamily: v.Family, LastSync: timePtr(v.Sync.LastSync), LastQueued: timePtr(v.Sync.LastQueued),
			NotSyncedSeconds: v.NotSynced.Seconds(), Pending: v.Sync.Pending(), ServiceChangesPending: m.ServiceChangesPending,
			EndpointChangesPending: m.EndpointChangesPending, HealthTimeoutSeconds: timeout.Seconds(), Health: hs, Stale: v.Stale, Note: note}
		if ph, ok := healthOf(health, v.Family); ok {
			f.Health = map[bool]string{true: "healthy", false: "unhealthy"}[ph.Healthy]
		}
		if v.Stale {
			f.JudgedBy = v.By
			stalls[v.Family+"@"+v.Sync.LastSync.Format(time.RFC3339Nano)] = v.NotSynced
		}
		findings = append(findings, f)
	}
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
	if len(parts) == 0 {
		return findings, ""
	}
	return findings, "kube-proxy runs in IPVS mode but has stopped programming it: " + strings.Join(parts, "; ") +
		": Services and endpoints changed since are not in the IPVS table (restart kube-proxy on this node and read its log)"
}

// health asks kube-proxy's /livez (its sync verdict without the node's
// eligibility), or /healthz when /livez is absent (before Kubernetes 1.28).
func (c *Checker) health(ctx context.Context, addr string) (*ProxyHealth, error) {
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
// answers (stopped, hung): when it last answered in IPVS mode and the
// oldest of its families' last syncs is older than its health timeout, the
// IPVS table is stale whatever changed since. Nil when it cannot say.
func (c *Checker) silentStall(ctx context.Context, err error) *check.Result {
	if ctx.Err() != nil || !silent(err) {
		return nil
	}
	now := c.now()
	fr := &c.fresh
	fr.mu.Lock()
	answered, timeout := fr.answered, fr.timeout
	var oldest time.Time
	var fams []string
	last := make(map[string]time.Time, len(fr.lastSync))
	for f, t := range fr.lastSync {
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
	key := "silent@" + oldest.Format(time.RFC3339Nano)
	d := fr.detectedAt(map[string]time.Duration{key: now.Sub(oldest)})[key]
	var findings []check.Finding
	for _, f := range sortedStrings(fams) {
		t := last[f]
		findings = append(findings, SyncFinding{IPFamily: f, LastSync: timePtr(t), NotSyncedSeconds: now.Sub(t).Seconds(),
			ServiceChangesPending: -1, EndpointChangesPending: -1, HealthTimeoutSeconds: timeout.Seconds(),
			Health: "not answering", Stale: true, JudgedBy: "silence"})
	}
	return &check.Result{Name: c.Name(), Status: check.StatusProblem, Reason: ReasonSyncStale, Findings: findings,
		Message: fmt.Sprintf("kube-proxy accepts connections on %s but has not answered since %s (stopped or hung) and has not synced IPVS rules since %s (%s when detected), longer than its health timeout of %s: Services and endpoints changed since are not in the IPVS table (restart kube-proxy on this node and read its log)",
			c.cfg.Client.Address(), answered.UTC().Format(time.RFC3339), oldest.UTC().Format(time.RFC3339), d.Round(time.Second), timeout),
		Remediation: []check.Step{c.cfg.Distro.KubeProxyRestart("read its log for the sync that hangs or fails")}}
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

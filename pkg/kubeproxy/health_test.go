// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

func TestFreshnessCounters(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type read struct {
		at                     time.Time
		sync                   FamilySync
		failing, cleanup, slow bool
	}
	tests := []struct {
		name  string
		reads []read
	}{
		{name: "one failure retried with success is no problem", reads: []read{
			{at: at(0), sync: FamilySync{LastSync: at(-5)}},
			{at: at(30), sync: FamilySync{LastSync: at(20), TxFailures: 1}},
		}},
		{name: "failures rising with no success since the previous read", reads: []read{
			{at: at(0), sync: FamilySync{LastSync: at(-5)}},
			{at: at(30), sync: FamilySync{LastSync: at(-5), TxFailures: 2}, failing: true},
			{at: at(60), sync: FamilySync{LastSync: at(-5), TxFailures: 4}, failing: true},
			{at: at(90), sync: FamilySync{LastSync: at(80), TxFailures: 4}},
		}},
		{name: "the first read judges no rise", reads: []read{
			{at: at(0), sync: FamilySync{LastSync: at(-500), TxFailures: 7}},
		}},
		{name: "cleanup failing in two reads running", reads: []read{
			{at: at(0), sync: FamilySync{LastSync: at(-1)}},
			{at: at(30), sync: FamilySync{LastSync: at(29), CleanupFailures: 1}},
			{at: at(60), sync: FamilySync{LastSync: at(59), CleanupFailures: 2}, cleanup: true},
			{at: at(90), sync: FamilySync{LastSync: at(89), CleanupFailures: 2}},
		}},
		{name: "full syncs longer than the sync period; the verdict stands until the next full sync", reads: []read{
			{at: at(0), sync: FamilySync{LastSync: at(-1), FullSyncs: 1, FullSyncSeconds: 0.5}},
			{at: at(60), sync: FamilySync{LastSync: at(59), FullSyncs: 2, FullSyncSeconds: 45.5}, slow: true},
			{at: at(90), sync: FamilySync{LastSync: at(89), FullSyncs: 2, FullSyncSeconds: 45.5}, slow: true},
			{at: at(120), sync: FamilySync{LastSync: at(119), FullSyncs: 3, FullSyncSeconds: 46.5}},
		}},
		{name: "a restarted kube-proxy starts its counters again", reads: []read{
			{at: at(0), sync: FamilySync{LastSync: at(-1), TxFailures: 5}},
			{at: at(30), sync: FamilySync{LastSync: at(-1), TxFailures: 1}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var fr freshness
			for i, r := range tc.reads {
				failing, cleanup, slow, _ := fr.counters(r.at, "IPv4", r.sync, 30*time.Second)
				if failing != r.failing || cleanup != r.cleanup || slow != r.slow {
					t.Errorf("read %d: failing %t cleanup %t slow %t, want %t %t %t", i, failing, cleanup, slow, r.failing, r.cleanup, r.slow)
				}
			}
		})
	}
}

// nftKubeProxy serves kube-proxy's metrics port in nftables mode with a
// body the test sets.
type nftKubeProxy struct {
	mu      sync.Mutex
	metrics string
	addr    string
}

func newNFTKubeProxy(t *testing.T, syncPeriod string) *nftKubeProxy {
	k := &nftKubeProxy{}
	mux := http.NewServeMux()
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("nftables")) })
	mux.HandleFunc("/configz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"kubeproxy.config.k8s.io":{"mode":"nftables","healthzBindAddress":%q,"nftables":{"syncPeriod":%q},"ipvs":{"syncPeriod":"30s"}}}`, k.addr, syncPeriod)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		k.mu.Lock()
		defer k.mu.Unlock()
		w.Write([]byte(k.metrics))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	k.addr = strings.TrimPrefix(srv.URL, "http://")
	return k
}

func (k *nftKubeProxy) set(lastSync time.Time, failures, cleanups, fullCount int, fullSum float64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.metrics = fmt.Sprintf(`# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} %d
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} %d
# TYPE kubeproxy_sync_proxy_rules_nftables_sync_failures_total counter
kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"} %d
# TYPE kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total counter
kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total{ip_family="IPv4"} %d
# TYPE kubeproxy_sync_full_proxy_rules_duration_seconds histogram
kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} %d
kubeproxy_sync_full_proxy_rules_duration_seconds_sum{ip_family="IPv4"} %g
kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} %d
`, lastSync.Unix(), lastSync.Unix()-1, failures, cleanups, fullCount, fullSum, fullCount)
}

// TestSyncCheckerNFTables: in nftables mode the kube-proxy-sync check runs
// (the IPVS prerequisites do not apply, kube-proxy's health does), with
// nftables.syncPeriod, and names failing transactions that /healthz ignores.
func TestSyncCheckerNFTables(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	k := newNFTKubeProxy(t, "10s")
	clock := now
	c, err := NewSyncChecker(SyncCheckerConfig{Client: NewClient(k.addr, time.Second), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at                time.Duration
		lastSync          time.Duration
		failures, cleanup int
		fullN             int
		fullSum           float64
		wantStatus        check.Status
		wantReason        string
		wantMsg           string
	}{
		{at: 0, lastSync: -2 * time.Second, fullN: 1, fullSum: 0.2, wantStatus: check.StatusOK, wantReason: ReasonSyncing, wantMsg: "nftables mode) syncs its rules within its health timeout of 20s"},
		{at: 10 * time.Second, lastSync: -2 * time.Second, failures: 3, fullN: 1, fullSum: 0.2, wantStatus: check.StatusProblem, wantReason: ReasonSyncFailing, wantMsg: "nftables transactions keep failing for IPv4 (none succeeded since " + now.Add(-2*time.Second).UTC().Format(time.RFC3339)},
		{at: 20 * time.Second, lastSync: 19 * time.Second, failures: 3, fullN: 2, fullSum: 12.2, wantStatus: check.StatusProblem, wantReason: ReasonSyncSlow, wantMsg: "full syncs of IPv4 take longer than its sync period of 10s"},
		{at: 30 * time.Second, lastSync: 29 * time.Second, failures: 3, cleanup: 1, fullN: 3, fullSum: 12.4, wantStatus: check.StatusOK, wantReason: ReasonSyncing},
		{at: 40 * time.Second, lastSync: 39 * time.Second, failures: 3, cleanup: 2, fullN: 3, fullSum: 12.4, wantStatus: check.StatusProblem, wantReason: ReasonCleanupFailing, wantMsg: "removal of stale nftables chains keeps failing for IPv4"},
	}
	for i, s := range steps {
		clock = now.Add(s.at)
		k.set(now.Add(s.lastSync), s.failures, s.cleanup, s.fullN, s.fullSum)
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Status != s.wantStatus || res.Reason != s.wantReason || !strings.Contains(res.Message, s.wantMsg) {
			t.Fatalf("step %d: got %s/%s %q, want %s/%s with %q", i, res.Status, res.Reason, res.Message, s.wantStatus, s.wantReason, s.wantMsg)
		}
	}
}

// TestSilentStallIgnoresUnsyncedFamily: a family that had never synced when
// kube-proxy last answered (IPv6 moments after a start) does not keep the
// stall of the other from being judged.
func TestSilentStallIgnoresUnsyncedFamily(t *testing.T) {
	now := time.Now()
	c, err := NewSyncChecker(SyncCheckerConfig{Client: NewClient("127.0.0.1:1", time.Second), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	c.fresh.remember(now.Add(-30*time.Second), ModeNFTables, 10*time.Second, []SyncVerdict{
		{Family: "IPv4", Sync: FamilySync{LastSync: now.Add(-31 * time.Second)}}, {Family: "IPv6"}})
	res := c.silentStall(context.Background(), ErrNotAnswering)
	if res == nil || res.Reason != ReasonSyncStale || !strings.Contains(res.Message, "not synced nftables rules") {
		t.Fatalf("got %+v, want a stall", res)
	}
}

// TestSyncSlowIgnoresSilence: a full sync that spans a silence (kube-proxy
// stopped mid-sync: SIGSTOP, a paused VM) counts the stop in its duration;
// it is no measure of kube-proxy's speed. A slow full sync later is.
func TestSyncSlowIgnoresSilence(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	k := newNFTKubeProxy(t, "10s")
	clock := now
	c, err := NewSyncChecker(SyncCheckerConfig{Client: NewClient(k.addr, time.Second), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	run := func(at time.Duration, fullN int, fullSum float64, wantReason string) {
		t.Helper()
		clock = now.Add(at)
		k.set(clock.Add(-time.Second), 0, 0, fullN, fullSum)
		res, err := c.Run(context.Background())
		if err != nil || res.Reason != wantReason {
			t.Fatalf("at %s: %s/%s %q (%v), want %s", at, res.Status, res.Reason, res.Message, err, wantReason)
		}
	}
	run(0, 1, 0.2, ReasonSyncing)
	clock = now.Add(10 * time.Second)
	c.silentStall(context.Background(), ErrNotAnswering)
	run(20*time.Second, 2, 15.2, ReasonSyncing)  // 15 s, of which the stop
	run(40*time.Second, 3, 27.2, ReasonSyncSlow) // 12 s, kube-proxy answering throughout
}

// TestSilentStallIdleFamilyNFTables: in nftables mode an idle family last
// synced at kube-proxy's start (kube-proxy 1.37.1 resyncs it hourly), so a
// request that timed out moments after kube-proxy answered is no stall; a
// silence of a whole health timeout is.
func TestSilentStallIdleFamilyNFTables(t *testing.T) {
	now := time.Now()
	answered := now.Add(-5 * time.Second)
	for _, tc := range []struct {
		name  string
		mode  string
		at    time.Time
		stall bool
	}{
		{"nftables, silent 5s of a 60s timeout", ModeNFTables, now, false},
		{"iptables, silent 5s of a 60s timeout", ModeIPTables, now, false},
		{"nftables, silent a whole timeout", ModeNFTables, answered.Add(61 * time.Second), true},
		{"ipvs: every family resyncs every sync period, the old one is a stall", ModeIPVS, now, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.at
			c, err := NewSyncChecker(SyncCheckerConfig{Client: NewClient("127.0.0.1:1", time.Second), Now: func() time.Time { return at }})
			if err != nil {
				t.Fatal(err)
			}
			c.fresh.remember(answered, tc.mode, time.Minute, []SyncVerdict{
				{Family: "IPv4", Sync: FamilySync{LastSync: answered.Add(-time.Second)}},
				{Family: "IPv6", Sync: FamilySync{LastSync: now.Add(-6 * time.Minute)}}})
			res := c.silentStall(context.Background(), ErrNotAnswering)
			if (res != nil) != tc.stall {
				t.Fatalf("stall = %v (%+v), want %v", res != nil, res, tc.stall)
			}
			if res != nil && res.Reason != ReasonSyncStale {
				t.Fatalf("reason %s, want %s", res.Reason, ReasonSyncStale)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

func TestParseSyncMetrics(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    map[string]FamilySync
		svc     float64
		eps     float64
		wantErr string
	}{
		{name: "dual-stack with pending changes", body: mustRead(t, "testdata/metrics-sync.txt"),
			want: map[string]FamilySync{
				"IPv4": {LastSync: time.Unix(1780099950, 0).UTC(), LastQueued: time.Unix(1780100000, 0).UTC()},
				"IPv6": {LastSync: time.Unix(1780099995, 0).UTC(), LastQueued: time.Unix(1780099990, 0).UTC()},
			}, svc: 1, eps: 2},
		{name: "no sync metrics (only build info)", body: mustRead(t, "testdata/metrics-build-info.txt"), wantErr: "no kubeproxy_sync_proxy_rules_last_timestamp_seconds"},
		{name: "never synced, no pending gauges", body: "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 0\n",
			want: map[string]FamilySync{"IPv4": {}}, svc: -1, eps: -1},
		{name: "garbage", body: "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\" 1\n", wantErr: "parsing kube-proxy metrics"},
		{name: "absurd timestamps are never", body: "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1e300\nkubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} NaN\n",
			want: map[string]FamilySync{"IPv4": {}}, svc: -1, eps: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseSyncMetrics(strings.NewReader(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(m.Families) != fmt.Sprint(tc.want) || m.ServiceChangesPending != tc.svc || m.EndpointChangesPending != tc.eps {
				t.Errorf("got %v svc %g eps %g, want %v svc %g eps %g", m.Families, m.ServiceChangesPending, m.EndpointChangesPending, tc.want, tc.svc, tc.eps)
			}
		})
	}
}

func TestHealthTimeoutAndAddress(t *testing.T) {
	tests := []struct {
		name        string
		configz     string
		wantTimeout time.Duration
		wantAddr    string
		wantNote    string
	}{
		{name: "1.37 v1alpha1, defaults", configz: mustRead(t, "testdata/configz-ipvs-lc.json"), wantTimeout: time.Minute, wantAddr: "127.0.0.1:10256"},
		{name: "1.30 internal struct", configz: mustRead(t, "testdata/configz-1.30-internal.json"), wantTimeout: time.Minute, wantAddr: "127.0.0.1:10256"},
		{name: "RKE2: loopback, sync period 10s", configz: `{"kubeproxy.config.k8s.io":{"mode":"ipvs","healthzBindAddress":"127.0.0.1:10256","ipvs":{"syncPeriod":"10s"}}}`, wantTimeout: 20 * time.Second, wantAddr: "127.0.0.1:10256"},
		{name: "internal top-level sync period, IPv6 any, no port", configz: `{"kubeproxy.config.k8s.io":{"Mode":"ipvs","HealthzBindAddress":"::","SyncPeriod":"45s"}}`, wantTimeout: 90 * time.Second, wantAddr: "[::1]:10256"},
		{name: "node IP and port", configz: `{"kubeproxy.config.k8s.io":{"mode":"ipvs","healthzBindAddress":"192.0.2.7:12345"}}`, wantTimeout: time.Minute, wantAddr: "192.0.2.7:12345"},
		{name: "bad duration is the default", configz: `{"kubeproxy.config.k8s.io":{"mode":"ipvs","ipvs":{"syncPeriod":"soon"}}}`, wantTimeout: time.Minute, wantAddr: "127.0.0.1:10256",
			wantNote: `/configz gives ipvs.syncPeriod "soon", not a duration such as "30s": kube-proxy's default sync period of 30s is assumed`},
		{name: "a bare number is not seconds, nor nanoseconds: the default, said", configz: `{"kubeproxy.config.k8s.io":{"mode":"ipvs","ipvs":{"syncPeriod":30}}}`, wantTimeout: time.Minute, wantAddr: "127.0.0.1:10256",
			wantNote: `/configz gives ipvs.syncPeriod 30, not a duration such as "30s": kube-proxy's default sync period of 30s is assumed`},
		{name: "a bare top-level number beside a good ipvs one: no note", configz: `{"kubeproxy.config.k8s.io":{"Mode":"ipvs","SyncPeriod":30,"IPVS":{"SyncPeriod":"10s"}}}`, wantTimeout: 20 * time.Second, wantAddr: "127.0.0.1:10256"},
		{name: "port out of range", configz: `{"kubeproxy.config.k8s.io":{"mode":"ipvs","healthzBindAddress":"127.0.0.1:99999"}}`, wantTimeout: time.Minute, wantAddr: "127.0.0.1:10256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfigz([]byte(tc.configz))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.HealthTimeout(); got != tc.wantTimeout {
				t.Errorf("HealthTimeout = %s, want %s", got, tc.wantTimeout)
			}
			if got := c.HealthzAddress(); got != tc.wantAddr {
				t.Errorf("HealthzAddress = %s, want %s", got, tc.wantAddr)
			}
			if got := c.HealthTimeoutNote(); got != tc.wantNote {
				t.Errorf("HealthTimeoutNote = %q, want %q", got, tc.wantNote)
			}
		})
	}
}

// TestHealthzTarget: kube-proxy's health is read on this node only: a
// healthzBindAddress naming another host, a name or an address on no local
// interface reads the loopback, and says so.
func TestHealthzTarget(t *testing.T) {
	local := func(a netip.Addr) bool {
		return a == netip.MustParseAddr("192.0.2.7") || a == netip.MustParseAddr("2001:db8::7")
	}
	tests := []struct {
		bind, want string
		note       bool
	}{
		{bind: "", want: "127.0.0.1:10256"},
		{bind: "0.0.0.0:10256", want: "127.0.0.1:10256"},
		{bind: "127.0.0.2:10256", want: "127.0.0.2:10256"},
		{bind: "[::1]:10256", want: "[::1]:10256"},
		{bind: "192.0.2.7:12345", want: "192.0.2.7:12345"},
		{bind: "[2001:db8::7]:12345", want: "[2001:db8::7]:12345"},
		{bind: "[::ffff:192.0.2.7]:12345", want: "[::ffff:192.0.2.7]:12345"},
		{bind: "192.0.2.7/24", want: "192.0.2.7:10256"},
		{bind: "203.0.113.9:10256", want: "127.0.0.1:10256", note: true},
		{bind: "169.254.169.254:80", want: "127.0.0.1:80", note: true},
		{bind: "metadata.example:10256", want: "127.0.0.1:10256", note: true},
		{bind: "[fe80::1%eth0]:10256", want: "127.0.0.1:10256", note: true},
	}
	for _, tt := range tests {
		got, note := Config{HealthzBindAddress: tt.bind}.HealthzTarget(local)
		if got != tt.want || (note != "") != tt.note {
			t.Errorf("HealthzTarget(%q) = %s, %q; want %s, note %v", tt.bind, got, note, tt.want, tt.note)
		}
	}
}

func TestJudgeSync(t *testing.T) {
	now := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	healthy := func(fam string, ok bool) *ProxyHealth {
		return &ProxyHealth{Code: map[bool]int{true: 200, false: 503}[ok], Healthy: ok, Status: map[string]ProxierHealth{fam: {Healthy: ok}}}
	}
	tests := []struct {
		name      string
		sync      FamilySync
		health    *ProxyHealth
		wantStale bool
		wantBy    string
	}{
		{name: "synced, nothing pending", sync: FamilySync{LastSync: ago(5 * time.Second), LastQueued: ago(6 * time.Second)}, wantBy: "metrics"},
		{name: "pending but recent", sync: FamilySync{LastSync: ago(40 * time.Second), LastQueued: ago(2 * time.Second)}, wantBy: "metrics"},
		{name: "pending, no sync for a whole timeout", sync: FamilySync{LastSync: ago(61 * time.Second), LastQueued: ago(2 * time.Second)}, wantStale: true, wantBy: "metrics"},
		{name: "no sync for long but nothing pending", sync: FamilySync{LastSync: ago(10 * time.Minute), LastQueued: ago(11 * time.Minute)}, wantBy: "metrics"},
		{name: "never synced (starting)", sync: FamilySync{LastQueued: ago(2 * time.Minute)}, wantBy: "metrics"},
		{name: "kube-proxy's own verdict unhealthy wins", sync: FamilySync{LastSync: ago(30 * time.Second), LastQueued: ago(2 * time.Second)}, health: healthy("IPv4", false), wantStale: true, wantBy: "healthz"},
		{name: "kube-proxy's own verdict healthy wins", sync: FamilySync{LastSync: ago(90 * time.Second), LastQueued: ago(2 * time.Second)}, health: healthy("IPv4", true), wantBy: "healthz"},
		{name: "healthz without this family: metrics decide", sync: FamilySync{LastSync: ago(90 * time.Second), LastQueued: ago(2 * time.Second)}, health: healthy("IPv6", true), wantStale: true, wantBy: "metrics"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := JudgeSync(now, time.Minute, SyncMetrics{Families: map[string]FamilySync{"IPv4": tc.sync}}, tc.health)
			if len(v) != 1 || v[0].Stale != tc.wantStale || v[0].By != tc.wantBy {
				t.Fatalf("got %+v, want stale %t by %s", v, tc.wantStale, tc.wantBy)
			}
		})
	}
}

// fakeSyncKubeProxy serves /proxyMode, /configz and /metrics like kube-proxy
// in IPVS mode with its healthz server (/livez) on the same port; set changes
// the sync times, and stop makes every request hang (SIGSTOP).
type fakeSyncKubeProxy struct {
	mu                sync.Mutex
	lastSync, lastQ   time.Time
	livez             int // 0: no healthz server (404)
	livezHealthy      bool
	stopped           chan struct{}
	stop              func()
	addr, healthzAddr string
}

func newFakeSyncKubeProxy(t *testing.T, syncPeriod string) *fakeSyncKubeProxy {
	f := &fakeSyncKubeProxy{stopped: make(chan struct{})}
	var once sync.Once
	f.stop = func() { once.Do(func() { close(f.stopped) }) }
	stopped := false
	mux := http.NewServeMux()
	wait := func(r *http.Request) bool {
		f.mu.Lock()
		s := stopped
		f.mu.Unlock()
		if s {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return true
		}
		return false
	}
	go func() { <-f.stopped; f.mu.Lock(); stopped = true; f.mu.Unlock() }()
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, r *http.Request) {
		if !wait(r) {
			w.Write([]byte("ipvs"))
		}
	})
	mux.HandleFunc("/configz", func(w http.ResponseWriter, r *http.Request) {
		if wait(r) {
			return
		}
		fmt.Fprintf(w, `{"kubeproxy.config.k8s.io":{"mode":"ipvs","healthzBindAddress":%q,"ipvs":{"syncPeriod":%q}}}`, f.healthzAddr, syncPeriod)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if wait(r) {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		fmt.Fprintf(w, "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} %d\nkubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} %d\n", f.lastSync.Unix(), f.lastQ.Unix())
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		if wait(r) {
			return
		}
		f.mu.Lock()
		code, ok := f.livez, f.livezHealthy
		f.mu.Unlock()
		if code == 0 {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"healthy": ok, "status": map[string]any{"IPv4": map[string]any{"healthy": ok}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { f.stop(); srv.Close() })
	f.addr = strings.TrimPrefix(srv.URL, "http://")
	f.healthzAddr = f.addr
	return f
}

func (f *fakeSyncKubeProxy) set(lastSync, lastQueued time.Time, livez int, healthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSync, f.lastQ, f.livez, f.livezHealthy = lastSync, lastQueued, livez, healthy
}

func TestCheckerSyncFreshness(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	type step struct {
		lastSync, lastQ time.Time
		livez           int
		healthy         bool
		stop            bool
		at              time.Time
		wantStatus      check.Status
		wantReason      string
		wantMsg         []string
		wantErr         bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "fresh", steps: []step{{lastSync: ago(3 * time.Second), lastQ: ago(4 * time.Second), livez: 200, healthy: true, at: now,
			wantStatus: check.StatusOK, wantReason: ReasonSyncing}}},
		{name: "kube-proxy's own /livez says unhealthy", steps: []step{{lastSync: ago(25 * time.Second), lastQ: ago(22 * time.Second), livez: 503, at: now,
			wantStatus: check.StatusProblem, wantReason: ReasonSyncStale, wantMsg: []string{"IPv4 rules not synced since " + ago(25*time.Second).UTC().Format(time.RFC3339), "25s when detected", "own /livez", "health timeout of 20s"}}}},
		{name: "no healthz server: metrics decide; the message keeps the first duration", steps: []step{
			{lastSync: ago(30 * time.Second), lastQ: ago(2 * time.Second), at: now, wantStatus: check.StatusProblem, wantReason: ReasonSyncStale, wantMsg: []string{"30s when detected", "/metrics"}},
			{lastSync: ago(30 * time.Second), lastQ: ago(2 * time.Second), at: now.Add(10 * time.Second), wantStatus: check.StatusProblem, wantReason: ReasonSyncStale, wantMsg: []string{"30s when detected"}},
			{lastSync: now.Add(9 * time.Second), lastQ: ago(2 * time.Second), at: now.Add(10 * time.Second), wantStatus: check.StatusOK, wantReason: ReasonSyncing},
		}},
		{name: "stopped (SIGSTOP): unknown until the last sync is a timeout old, then stale", steps: []step{
			{lastSync: ago(2 * time.Second), lastQ: ago(3 * time.Second), livez: 200, healthy: true, at: now, wantStatus: check.StatusOK, wantReason: ReasonSyncing},
			{stop: true, at: now.Add(10 * time.Second), wantErr: true},
			{stop: true, at: now.Add(19 * time.Second), wantStatus: check.StatusProblem, wantReason: ReasonSyncStale, wantMsg: []string{"has not answered since", "not synced ipvs rules since " + ago(2*time.Second).UTC().Format(time.RFC3339), "21s when detected", "health timeout of 20s"}},
		}},
	}
	tests = append(tests,
		struct {
			name  string
			steps []step
		}{name: "silent from the start: no last sync to judge by, an error", steps: []step{
			{stop: true, at: now, wantErr: true},
			{stop: true, at: now.Add(time.Minute), wantErr: true},
		}},
		struct {
			name  string
			steps []step
		}{name: "update pending for a whole timeout, but kube-proxy's /livez says healthy: kube-proxy's verdict", steps: []step{
			{lastSync: ago(21 * time.Second), lastQ: ago(1 * time.Second), livez: 200, healthy: true, at: now, wantStatus: check.StatusOK, wantReason: ReasonSyncing},
		}},
	)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fk := newFakeSyncKubeProxy(t, "10s")
			var clock time.Time
			c, err := NewSyncChecker(SyncCheckerConfig{Client: NewClient(fk.addr, 300*time.Millisecond), Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				clock = s.at
				if s.stop {
					fk.stop()
				} else {
					fk.set(s.lastSync, s.lastQ, s.livez, s.healthy)
				}
				res, err := c.Run(context.Background())
				if s.wantErr {
					if err == nil {
						t.Fatalf("step %d: got %s/%s, want an error", i, res.Status, res.Reason)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if res.Status != s.wantStatus || res.Reason != s.wantReason {
					t.Fatalf("step %d: got %s/%s (%s), want %s/%s", i, res.Status, res.Reason, res.Message, s.wantStatus, s.wantReason)
				}
				for _, w := range s.wantMsg {
					if !strings.Contains(res.Message, w) {
						t.Errorf("step %d: message %q lacks %q", i, res.Message, w)
					}
				}
			}
		})
	}
}

// TestCheckerSyncMetricsUnreadable: /metrics without sync metrics (an old
// kube-proxy, a proxy in front of it) leaves the check ok and says so in a
// finding; it never flips the condition.
func TestCheckerSyncMetricsUnreadable(t *testing.T) {
	srv := fakeKubeProxy(t, "ipvs", "testdata/configz-ipvs-lc.json")
	c, err := NewSyncChecker(SyncCheckerConfig{Client: NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK || res.Reason != ReasonSyncing {
		t.Fatalf("got %s/%s (%s), want ok/%s", res.Status, res.Reason, res.Message, ReasonSyncing)
	}
	var found bool
	for _, f := range res.Findings {
		if sf, ok := f.(SyncFinding); ok && sf.IPFamily == "" && strings.Contains(sf.Error, "no kubeproxy_sync_proxy_rules_last_timestamp_seconds") {
			found = true
			if !strings.Contains(sf.String(), "sync freshness unknown") {
				t.Errorf("finding line %q", sf.String())
			}
		}
	}
	if !found {
		t.Errorf("no finding says the sync metrics are missing: %v", res.Findings)
	}
}

func TestParseProxyHealth(t *testing.T) {
	// The body kube-proxy 1.37's /healthz writes (proxy_health.go).
	body := `{"lastUpdated":"2026-11-26T05:00:00Z","currentTime":"2026-11-26T05:01:00Z","nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":"2026-11-26T05:00:00Z","healthy":false},"IPv6":{"lastUpdated":"2026-11-26T05:00:59Z","healthy":true}}}`
	h, err := ParseProxyHealth(503, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if h.Healthy || h.Status["IPv4"].Healthy || !h.Status["IPv6"].Healthy || h.NodeEligible == nil || !*h.NodeEligible {
		t.Errorf("got %+v", h)
	}
	for _, tc := range []struct {
		code int
		body string
	}{{500, body}, {200, "<html>"}, {404, "404 page not found"}} {
		if _, err := ParseProxyHealth(tc.code, []byte(tc.body)); err == nil {
			t.Errorf("ParseProxyHealth(%d, %q): no error", tc.code, tc.body)
		}
	}
}

func TestSilent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // accepts (the kernel's backlog) and never answers
	c := NewClient(l.Addr().String(), 100*time.Millisecond)
	_, err = c.ProxyMode(context.Background())
	if !silent(err) {
		t.Errorf("a port that never answers: silent(%v) = false", err)
	}
	_, err = c.ProxyMode(context.Background())
	if !silent(err) {
		t.Errorf("the quiet period after it: silent(%v) = false", err)
	}
	if silent(fmt.Errorf("GET: HTTP 500")) {
		t.Error("an HTTP error is not silence")
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b)) + "\n"
}

// FuzzParseSyncMetrics: any /metrics body parses or fails cleanly; what
// parses judges without panic.
func FuzzParseSyncMetrics(f *testing.F) {
	for _, p := range []string{"testdata/metrics-sync.txt", "testdata/metrics-build-info.txt"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} -Inf\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseSyncMetrics(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, v := range JudgeSync(time.Now(), time.Minute, m, nil) {
			_ = SyncFinding{IPFamily: v.Family, LastSync: timePtr(v.Sync.LastSync)}.String()
		}
	})
}

// FuzzParseProxyHealth: any /healthz or /livez body parses or fails cleanly.
func FuzzParseProxyHealth(f *testing.F) {
	f.Add(503, []byte(`{"healthy":false,"status":{"IPv4":{"lastUpdated":"2026-11-26T05:00:00Z","healthy":false}}}`))
	f.Add(200, []byte(`{"lastUpdated":"x"}`))
	f.Fuzz(func(t *testing.T, code int, b []byte) {
		h, err := ParseProxyHealth(code, b)
		if err != nil {
			return
		}
		_ = JudgeSync(time.Now(), time.Minute, SyncMetrics{Families: map[string]FamilySync{"IPv4": {}}}, &h)
	})
}

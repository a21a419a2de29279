// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveCheck(check.Result{Name: check.NameModules, Status: check.StatusOK}, nil, 20*time.Millisecond)
	m.ObserveCheck(check.Result{Name: check.NameModules, Status: check.StatusProblem}, nil, 3*time.Second)
	m.ObserveCheck(check.Result{Name: check.NameIPVS}, errors.New("netlink: EPERM"), time.Millisecond)
	m.ObserveCheck(check.Result{Name: check.NameARP, Status: check.StatusProblem, Findings: []check.Finding{
		arpFinding(check.ARPState{IP: "192.0.2.10", Interface: "eth0", Result: "answered", Responders: 1, RTTSeconds: 0.0008}),
		arpFinding(check.ARPState{IP: "192.0.2.11", Interface: "eth0", Result: "no-reply"}),
	}}, nil, 300*time.Millisecond)
	m.ObserveModuleLoad("ip_vs_lc", nil)
	m.ObserveModuleLoad("ip_vs_nosuch", errors.New("not found"))
	m.ObserveModuleLoad("ip_vs_nosuch", errors.New("not found"))

	want := `
# HELP ipvs_guard_modules_load_attempts_total Number of kernel module load attempts by remediation, by module and result (success or failure).
# TYPE ipvs_guard_modules_load_attempts_total counter
ipvs_guard_modules_load_attempts_total{module="ip_vs_lc",result="success"} 1
ipvs_guard_modules_load_attempts_total{module="ip_vs_nosuch",result="failure"} 2
# HELP ipvs_guard_arp_probe_duration_seconds Time from sending an ARP probe of a LoadBalancer IP to its first reply, by result.
# TYPE ipvs_guard_arp_probe_duration_seconds histogram
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.0005"} 0
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.001"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.0025"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.005"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.01"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.025"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.05"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.1"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.25"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="0.5"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="1"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="2.5"} 1
ipvs_guard_arp_probe_duration_seconds_bucket{result="answered",le="+Inf"} 1
ipvs_guard_arp_probe_duration_seconds_sum{result="answered"} 0.0008
ipvs_guard_arp_probe_duration_seconds_count{result="answered"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"ipvs_guard_modules_load_attempts_total", "ipvs_guard_arp_probe_duration_seconds"); err != nil {
		t.Error(err)
	}
	// One histogram per check; the 3 s modules run lands above the 2.5 s bucket.
	if got := testutil.CollectAndCount(m.reconcileDuration); got != 3 {
		t.Errorf("duration histograms: got %d, want 3 (one per check)", got)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestNewMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("second NewMetrics on the same registry: got nil error, want a registration error")
	}
}

func TestNewRegistry(t *testing.T) {
	reg, m, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(NewCollector(func() Snapshot {
		return Snapshot{Results: []check.Result{{Name: check.NameModules, Status: check.StatusOK}}}
	})); err != nil {
		t.Fatal(err)
	}
	m.ObserveCheck(check.Result{Name: check.NameModules, Status: check.StatusOK}, nil, time.Millisecond)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes", "ipvs_guard_build_info", "ipvs_guard_check_status", "ipvs_guard_reconcile_duration_seconds"} {
		if !names[want] {
			t.Errorf("registry lacks %s", want)
		}
	}
}

func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(func() Snapshot { return Snapshot{} }, testInfo))
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `ipvs_guard_build_info{build_date="2026-01-01T00:00:00Z"`) {
		t.Errorf("GET /metrics: %d\n%s", resp.StatusCode, body)
	}
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"
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
	now := time.Unix(1700000000, 0)
	m.ObserveCheck(check.Result{Name: check.NameModules, Status: check.StatusOK}, nil, 20*time.Millisecond, now)
	m.ObserveCheck(check.Result{Name: check.NameModules, Status: check.StatusProblem}, nil, 20*time.Millisecond, now.Add(time.Minute))
	m.ObserveCheck(check.Errored(check.NameIPVS, errors.New("EPERM")), nil, time.Millisecond, now.Add(2*time.Minute))
	m.ObserveCheck(check.Result{Name: check.NameIPVS}, errors.New("netlink: EPERM"), time.Millisecond, now.Add(3*time.Minute))
	m.ObserveCheck(check.Result{Name: check.NameARP, Status: check.StatusProblem, Findings: []check.Finding{
		arpFinding{IP: "192.0.2.10", Interface: "eth0", Result: "answered", MACs: []string{"02:00:00:00:00:01"}, RTTSeconds: 0.0008},
		arpFinding{IP: "192.0.2.11", Interface: "eth0", Result: "no-reply"},
	}}, nil, 300*time.Millisecond, now.Add(4*time.Minute))
	m.ObserveModuleLoad("ip_vs_lc", nil)
	m.ObserveModuleLoad("ip_vs_nosuch", errors.New("not found"))
	m.ObserveModuleLoad("ip_vs_nosuch", errors.New("not found"))

	want := `
# HELP ipvs_guard_modules_load_attempts_total Number of kernel module load attempts by remediation, by module and result (success or failure).
# TYPE ipvs_guard_modules_load_attempts_total counter
ipvs_guard_modules_load_attempts_total{module="ip_vs_lc",result="success"} 1
ipvs_guard_modules_load_attempts_total{module="ip_vs_nosuch",result="failure"} 2
# HELP ipvs_guard_reconcile_errors_total Number of check runs that could not complete (infrastructure errors such as EPERM on netlink), by check.
# TYPE ipvs_guard_reconcile_errors_total counter
ipvs_guard_reconcile_errors_total{check="ipvs"} 2
# HELP ipvs_guard_reconcile_last_success_timestamp_seconds Unix time of the last check run that completed without an infrastructure error, by check.
# TYPE ipvs_guard_reconcile_last_success_timestamp_seconds gauge
ipvs_guard_reconcile_last_success_timestamp_seconds{check="arp"} 1.70000024e+09
ipvs_guard_reconcile_last_success_timestamp_seconds{check="modules"} 1.70000006e+09
# HELP ipvs_guard_reconcile_total Number of check runs by the reconcile loop, by check and outcome status.
# TYPE ipvs_guard_reconcile_total counter
ipvs_guard_reconcile_total{check="arp",status="problem"} 1
ipvs_guard_reconcile_total{check="ipvs",status="error"} 2
ipvs_guard_reconcile_total{check="modules",status="ok"} 1
ipvs_guard_reconcile_total{check="modules",status="problem"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"ipvs_guard_modules_load_attempts_total", "ipvs_guard_reconcile_errors_total",
		"ipvs_guard_reconcile_last_success_timestamp_seconds", "ipvs_guard_reconcile_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(m.reconcileDuration); got != 3 {
		t.Errorf("duration histograms: got %d, want 3 (one per check)", got)
	}
	// Only the answered probe has a round-trip time.
	if got := testutil.CollectAndCount(m.arpProbeDuration); got != 1 {
		t.Errorf("arp probe histograms: got %d, want 1", got)
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
	reg, m, err := NewRegistry(func() Snapshot {
		return Snapshot{Results: []check.Result{{Name: check.NameModules, Status: check.StatusOK}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveCheck(check.Result{Name: check.NameModules, Status: check.StatusOK}, nil, time.Millisecond, time.Unix(1, 0))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes", "ipvs_guard_build_info", "ipvs_guard_check_status", "ipvs_guard_reconcile_total"} {
		if !names[want] {
			t.Errorf("registry lacks %s", want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/results"
)

// TestStoreSnapshot reads the agent's results store: results, run counts and
// the conditions nodestatus derives for the enabled checks.
func TestStoreSnapshot(t *testing.T) {
	enabled := []string{check.NameModules, check.NameARP}
	store := results.NewStore(enabled...)
	start := time.Unix(1700000000, 0)
	store.Record(check.NameModules, check.Result{
		Name: check.NameModules, Status: check.StatusProblem, Reason: "ModulesNotLoaded", Message: "ip_vs_lc is not loaded",
		Findings: []check.Finding{moduleFinding(check.ModuleState{Module: "ip_vs_lc", Available: true})},
	}, nil, start, 40*time.Millisecond)
	c := newCollector(StoreSnapshot(store, enabled), testInfo)

	want := `
# HELP ipvs_guard_modules_loaded Whether a required kernel module is loaded or built in (1) or not (0).
# TYPE ipvs_guard_modules_loaded gauge
ipvs_guard_modules_loaded{module="ip_vs_lc"} 0
# HELP ipvs_guard_reconcile_total Number of finished check runs by the reconcile loop, by check.
# TYPE ipvs_guard_reconcile_total counter
ipvs_guard_reconcile_total{check="arp"} 0
ipvs_guard_reconcile_total{check="modules"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ipvs_guard_modules_loaded", "ipvs_guard_reconcile_total"); err != nil {
		t.Error(err)
	}
	// IPVSModulesMissing follows the modules result; the arp check has not
	// run, so its condition is not True.
	if got := testutil.CollectAndCount(c, "ipvs_guard_node_condition_status"); got == 0 {
		t.Fatal("no condition series")
	}
	conds := StoreSnapshot(store, enabled)().Conditions
	status := map[string]string{}
	for _, cond := range conds {
		status[cond.Type] = cond.Status
	}
	if status["IPVSModulesMissing"] != "True" {
		t.Errorf("IPVSModulesMissing is %q, want True for a modules problem (conditions %+v)", status["IPVSModulesMissing"], conds)
	}
	if status["LoadBalancerARPFailing"] == "True" {
		t.Error("LoadBalancerARPFailing is True before the arp check ran")
	}

	// An infrastructure error counts as an error and keeps the last success.
	store.Record(check.NameModules, check.Errored(check.NameModules, errors.New("EPERM")), errors.New("EPERM"), start.Add(time.Minute), time.Millisecond)
	wantErr := `
# HELP ipvs_guard_reconcile_errors_total Number of check runs that could not complete (infrastructure errors such as EPERM on netlink), by check.
# TYPE ipvs_guard_reconcile_errors_total counter
ipvs_guard_reconcile_errors_total{check="arp"} 0
ipvs_guard_reconcile_errors_total{check="modules"} 1
# HELP ipvs_guard_reconcile_last_success_timestamp_seconds Unix time the last check run without an infrastructure error started, by check (absent before the first).
# TYPE ipvs_guard_reconcile_last_success_timestamp_seconds gauge
ipvs_guard_reconcile_last_success_timestamp_seconds{check="modules"} 1.7e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantErr), "ipvs_guard_reconcile_errors_total", "ipvs_guard_reconcile_last_success_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}

func TestInstrument(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inner := check.Func{CheckName: check.NameIPVS, Fn: func(context.Context) (check.Result, error) {
		return check.Result{}, errors.New("netlink: EPERM")
	}}
	c := Instrument(inner, m)
	if c.Name() != check.NameIPVS {
		t.Errorf("Name: got %q", c.Name())
	}
	if _, err := c.Run(context.Background()); err == nil || err.Error() != "netlink: EPERM" {
		t.Errorf("Run error not passed through: %v", err)
	}
	if got := testutil.CollectAndCount(m.reconcileDuration); got != 1 {
		t.Errorf("duration histograms: got %d, want 1 labelled with the checker's name", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "ipvs_guard_reconcile_duration_seconds"); err == nil {
		t.Error("no ipvs_guard_reconcile_duration_seconds{check=\"ipvs\"} recorded")
	}
}

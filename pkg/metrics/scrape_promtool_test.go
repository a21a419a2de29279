// SPDX-License-Identifier: Apache-2.0

//go:build promtool

package metrics

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestScrapeIsValidForPromtool serves the collector and the activity metrics
// over HTTP, as the agent does, scrapes /metrics and has the real promtool
// check the exposition (format and naming lint).
func TestScrapeIsValidForPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	testenv.Require(t, err == nil, "promtool not on PATH (make test-rules installs it)")

	snap := Snapshot{
		Results: []check.Result{
			{Name: check.NameModules, Status: check.StatusProblem, Findings: []check.Finding{
				moduleFinding(check.ModuleState{Module: "ip_vs", Loaded: true, Available: true, Declared: true}),
				moduleFinding(check.ModuleState{Module: "ip_vs_rr", Loaded: true, Available: true, Declared: true}),
				moduleFinding(check.ModuleState{Module: "ip_vs_lc", Available: true}),
				moduleFinding(check.ModuleState{Module: "nf_conntrack", Loaded: true, Available: true, Declared: true}),
				moduleFinding(check.ModuleState{Module: "nf_conntrack_ipv4", Declared: true, Stale: true}),
			}},
			{Name: check.NameKubeProxy, Status: check.StatusOK, Findings: []check.Finding{modeFinding("ipvs"),
				stateFinding{KubeProxySync: &check.KubeProxySyncState{IPFamily: "IPv4", LastSyncSeconds: 1780000000, LastQueuedSeconds: 1780000001, HealthTimeoutSeconds: 60}}}},
			{Name: check.NameIPVS, Status: check.StatusOK, Findings: []check.Finding{tableFinding(12, 1)}},
			{Name: check.NameARPSysctls, Status: check.StatusSkipped},
			{Name: check.NameARP, Status: check.StatusProblem, Findings: []check.Finding{
				arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Result: "answered", Responders: 1, RTTSeconds: 0.0009}),
				arpFinding(check.ARPState{IP: "192.0.2.11", Family: "ipv4", Interface: "eth0", Result: "no-reply", Service: "default/dns"}),
			}},
			{Name: check.NameIPVSSysctls, Status: check.StatusOK, Findings: []check.Finding{
				stateFinding{Sysctl: &check.SysctlState{Name: "ipvs.timeout.tcp", Value: 900},
					Advisory: &check.AdvisoryState{Check: check.NameIPVSSysctls, Advisory: "IPVSTCPTimeoutBelowKeepalive", Severity: "warning"}},
				stateFinding{Sysctl: &check.SysctlState{Name: "net.ipv4.tcp_keepalive_time", Value: 7200}},
			}},
			{Name: check.NameConntrack, Status: check.StatusOK, Findings: []check.Finding{stateFinding{Conntrack: &check.ConntrackState{Entries: 950, Max: 1000}}}},
		},
		Conditions: []Condition{
			{Type: "IPVSModulesMissing", Status: "True", Reason: "ModulesNotLoaded"},
			{Type: "KubeProxyIPVSDegraded", Status: "False", Reason: "IPVSHealthy"},
			{Type: "StrictARPDisabled", Status: "False", Reason: "StrictARPEnabled"},
			{Type: "LoadBalancerARPFailing", Status: "True", Reason: "NoReply"},
		},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	now := time.Now()
	snap.Checks = []CheckRuns{
		{Name: check.NameModules, Runs: 12, LastSuccess: now, LastDuration: 15 * time.Millisecond},
		{Name: check.NameIPVS, Runs: 12, Errors: 1, LastSuccess: now.Add(-time.Minute), LastDuration: time.Millisecond},
	}
	reg.MustRegister(NewCollector(func() Snapshot { return snap }))
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Results {
		m.ObserveCheck(r, nil, 15*time.Millisecond)
	}
	m.ObserveCheck(check.Result{Name: check.NameIPVS}, errors.New("netlink: operation not permitted"), time.Millisecond)
	m.ObserveModuleLoad("ip_vs_lc", nil)

	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, err %v", resp.StatusCode, err)
	}
	for _, want := range []string{
		`ipvs_guard_modules_loaded{module="ip_vs_lc"} 0`,
		`ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="no-reply",service="default/dns"} 1`,
		`ipvs_guard_reconcile_errors_total{check="ipvs"} 1`,
		`ipvs_guard_build_info{`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	t.Logf("promtool check metrics on %d bytes, %d lines: %s", len(body), bytes.Count(body, []byte("\n")), out)
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// TestCollectorRealFindings feeds the checking packages' own finding types,
// by value and by pointer.
func TestCollectorRealFindings(t *testing.T) {
	snap := Snapshot{Results: []check.Result{
		{Name: check.NameModules, Status: check.StatusProblem, Findings: []check.Finding{
			modules.Finding{Module: "ip_vs", Loaded: true, Available: true, Declared: true},
			&modules.Finding{Module: "ip_vs_lc", Available: true},
		}},
		{Name: check.NameARP, Status: check.StatusProblem, Findings: []check.Finding{
			arpcheck.Finding{IP: "192.0.2.10", Interface: "eth0", Service: "default/web", Result: arpcheck.ResultConflict, MACs: []string{"02:00:00:00:00:01", "02:00:00:00:00:02"}, RTTSeconds: 0.001},
			&arpcheck.Finding{IP: "192.0.2.11", Interface: "eth0", Result: arpcheck.ResultWrongResponder, MACs: []string{"02:00:00:00:00:03"}, RTTSeconds: 0.002},
			arpcheck.Finding{IP: "192.0.2.12", Interface: "eth0", Result: arpcheck.ResultUnknown},
		}},
	}}
	want := `
# HELP ipvs_guard_arp_responders Number of distinct MAC addresses that answered the latest ARP probe of a LoadBalancer IP.
# TYPE ipvs_guard_arp_responders gauge
ipvs_guard_arp_responders{interface="eth0",ip="192.0.2.10"} 2
ipvs_guard_arp_responders{interface="eth0",ip="192.0.2.11"} 1
# HELP ipvs_guard_modules_loaded Whether a required kernel module is loaded or built in (1) or not (0).
# TYPE ipvs_guard_modules_loaded gauge
ipvs_guard_modules_loaded{module="ip_vs"} 1
ipvs_guard_modules_loaded{module="ip_vs_lc"} 0
`
	c := newCollector(func() Snapshot { return snap }, testInfo)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ipvs_guard_arp_responders", "ipvs_guard_modules_loaded"); err != nil {
		t.Error(err)
	}
	wantResult := `
# HELP ipvs_guard_arp_probe_result Latest ARP probe result for a LoadBalancer IP this node probes: 1 for the current result, 0 for the others. service is the IP's Service (namespace/name), empty when unknown.
# TYPE ipvs_guard_arp_probe_result gauge
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.10",result="answered",service="default/web"} 0
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.10",result="conflict",service="default/web"} 1
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.10",result="no-reply",service="default/web"} 0
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.10",result="wrong-responder",service="default/web"} 0
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.11",result="answered",service=""} 0
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.11",result="conflict",service=""} 0
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.11",result="no-reply",service=""} 0
ipvs_guard_arp_probe_result{interface="eth0",ip="192.0.2.11",result="wrong-responder",service=""} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantResult), "ipvs_guard_arp_probe_result"); err != nil {
		t.Error(err)
	}
}

type fakeLoader struct {
	fail  map[string]bool
	calls [][]string
}

func (f *fakeLoader) Load(_ context.Context, names []string) ([]string, error) {
	f.calls = append(f.calls, names)
	var out []string
	var errs []error
	for _, n := range names {
		if f.fail[n] {
			errs = append(errs, errors.New(n+": not found"))
			continue
		}
		out = append(out, n)
	}
	return out, errors.Join(errs...)
}

func TestCountingLoader(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeLoader{fail: map[string]bool{"ip_vs_nosuch": true}}
	l := CountingLoader{Loader: fake, Metrics: m}
	got, err := l.Load(context.Background(), []string{"ip_vs", "ip_vs_nosuch", "ip_vs_lc"})
	if err == nil || !strings.Contains(err.Error(), "ip_vs_nosuch: not found") {
		t.Errorf("error %v does not carry the failing module's error", err)
	}
	if diff := cmp.Diff([]string{"ip_vs", "ip_vs_lc"}, got); diff != "" {
		t.Errorf("inserted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"ip_vs"}, {"ip_vs_nosuch"}, {"ip_vs_lc"}}, fake.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	want := `
# HELP ipvs_guard_modules_load_attempts_total Number of kernel module load attempts by remediation, by module and result (success or failure).
# TYPE ipvs_guard_modules_load_attempts_total counter
ipvs_guard_modules_load_attempts_total{module="ip_vs",result="success"} 1
ipvs_guard_modules_load_attempts_total{module="ip_vs_lc",result="success"} 1
ipvs_guard_modules_load_attempts_total{module="ip_vs_nosuch",result="failure"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ipvs_guard_modules_load_attempts_total"); err != nil {
		t.Error(err)
	}
	m.ObserveCheck(check.Result{Name: check.NameARP, Status: check.StatusOK, Findings: []check.Finding{
		arpcheck.Finding{IP: "192.0.2.10", Interface: "eth0", Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:01"}, RTTSeconds: 0.0004},
	}}, nil, time.Millisecond)
	if got := testutil.CollectAndCount(m.arpProbeDuration); got != 1 {
		t.Errorf("arp probe histograms from real findings: got %d, want 1", got)
	}
}

func TestCollectorKubeProxyFinding(t *testing.T) {
	on := true
	snap := Snapshot{Results: []check.Result{{Name: check.NameKubeProxy, Status: check.StatusOK, Findings: []check.Finding{
		&kubeproxy.Finding{Mode: "ipvs", StrictARP: &on, KubeIPVS0: true},
	}}}}
	want := `
# HELP ipvs_guard_kube_proxy_mode The proxy mode kube-proxy reports on its metrics port; the value is always 1.
# TYPE ipvs_guard_kube_proxy_mode gauge
ipvs_guard_kube_proxy_mode{mode="ipvs"} 1
# HELP ipvs_guard_kube_proxy_strict_arp Whether kube-proxy's configuration (/configz) has IPVS strictARP on (1) or off (0); absent when unknown.
# TYPE ipvs_guard_kube_proxy_strict_arp gauge
ipvs_guard_kube_proxy_strict_arp 1
`
	c := newCollector(func() Snapshot { return snap }, testInfo)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ipvs_guard_kube_proxy_mode", "ipvs_guard_kube_proxy_strict_arp"); err != nil {
		t.Error(err)
	}
	// Unknown strictARP (no /configz) exposes no series rather than a guess.
	snap.Results[0].Findings = []check.Finding{kubeproxy.Finding{Mode: "iptables"}}
	if got := testutil.CollectAndCount(c, "ipvs_guard_kube_proxy_strict_arp"); got != 0 {
		t.Errorf("strict_arp series with unknown strictARP: got %d, want 0", got)
	}
}

// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/metrics"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// TestCollectorRealFindings feeds the checking packages' own finding types,
// by value and by pointer, through the state they publish.
func TestCollectorRealFindings(t *testing.T) {
	noReal := 1
	snap := metrics.Snapshot{Results: []check.Result{
		{Name: check.NameModules, Status: check.StatusProblem, Findings: []check.Finding{
			modules.Finding{Module: "ip_vs", Loaded: true, Available: true, Declared: true},
			&modules.Finding{Module: "ip_vs_lc", Available: true},
			modules.Finding{Module: "nf_conntrack", Builtin: true},
			(*modules.Finding)(nil),
		}},
		{Name: check.NameIPVS, Status: check.StatusOK, Findings: []check.Finding{
			ipvscheck.Summary{VirtualServers: 3, RealServers: 4, VirtualServersWithoutRealServers: &noReal},
			ipvscheck.Finding{VIP: "10.43.0.1", Port: 443, Protocol: "TCP", Problem: ipvscheck.ProblemNoRealServers},
		}},
		{Name: check.NameARP, Status: check.StatusProblem, Findings: []check.Finding{
			arpcheck.Finding{IP: "192.0.2.10", Interface: "eth0", Service: "default/web", Result: arpcheck.ResultConflict, MACs: []string{"02:00:00:00:00:01", "02:00:00:00:00:02"}, RTTSeconds: 0.001},
			&arpcheck.Finding{IP: "192.0.2.11", Interface: "eth0", Result: arpcheck.ResultWrongResponder, MACs: []string{"02:00:00:00:00:03"}, RTTSeconds: 0.002},
			arpcheck.Finding{IP: "192.0.2.12", Interface: "eth0", Result: arpcheck.ResultUnknown},
		}},
	}}
	want := `
# HELP ipvs_guard_arp_responders Number of distinct MAC addresses that answered the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP.
# TYPE ipvs_guard_arp_responders gauge
ipvs_guard_arp_responders{family="ipv4",interface="eth0",ip="192.0.2.10"} 2
ipvs_guard_arp_responders{family="ipv4",interface="eth0",ip="192.0.2.11"} 1
# HELP ipvs_guard_ipvs_virtual_servers Number of IPVS virtual servers in the node's table.
# TYPE ipvs_guard_ipvs_virtual_servers gauge
ipvs_guard_ipvs_virtual_servers 3
# HELP ipvs_guard_ipvs_virtual_servers_without_real_servers Number of IPVS virtual servers whose Service has ready endpoints but which have no real servers.
# TYPE ipvs_guard_ipvs_virtual_servers_without_real_servers gauge
ipvs_guard_ipvs_virtual_servers_without_real_servers 1
# HELP ipvs_guard_modules_loaded Whether a required kernel module is loaded or built in (1) or not (0).
# TYPE ipvs_guard_modules_loaded gauge
ipvs_guard_modules_loaded{module="ip_vs"} 1
ipvs_guard_modules_loaded{module="ip_vs_lc"} 0
ipvs_guard_modules_loaded{module="nf_conntrack"} 1
`
	c := metrics.NewCollector(func() metrics.Snapshot { return snap })
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ipvs_guard_arp_responders", "ipvs_guard_modules_loaded",
		"ipvs_guard_ipvs_virtual_servers", "ipvs_guard_ipvs_virtual_servers_without_real_servers"); err != nil {
		t.Error(err)
	}
	wantResult := `
# HELP ipvs_guard_arp_probe_result Latest ARP (IPv4) or NDP (IPv6) probe result for a LoadBalancer IP this node probes: 1 for the current result, 0 for the others. service is the IP's Service (namespace/name), empty when unknown.
# TYPE ipvs_guard_arp_probe_result gauge
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="answered",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="conflict",service="default/web"} 1
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="no-reply",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="reply-from-down-interface",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="reply-from-other-interface",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="wrong-responder",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="answered",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="conflict",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="no-reply",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="reply-from-down-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="reply-from-other-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="wrong-responder",service=""} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantResult), "ipvs_guard_arp_probe_result"); err != nil {
		t.Error(err)
	}
}

// TestObserveCheckRealFindings feeds a real ARP finding to the probe
// duration histogram.
func TestObserveCheckRealFindings(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveCheck(check.Result{Name: check.NameARP, Status: check.StatusOK, Findings: []check.Finding{
		arpcheck.Finding{IP: "192.0.2.10", Interface: "eth0", Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:01"}, RTTSeconds: 0.0004},
	}}, nil, time.Millisecond)
	if got := gatherCount(t, reg, "ipvs_guard_arp_probe_duration_seconds"); got != 1 {
		t.Errorf("arp probe histograms from real findings: got %d, want 1", got)
	}
}

func TestCollectorKubeProxyFinding(t *testing.T) {
	on := true
	snap := metrics.Snapshot{Results: []check.Result{{Name: check.NameKubeProxy, Status: check.StatusOK, Findings: []check.Finding{
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
	c := metrics.NewCollector(func() metrics.Snapshot { return snap })
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ipvs_guard_kube_proxy_mode", "ipvs_guard_kube_proxy_strict_arp"); err != nil {
		t.Error(err)
	}
	// Unknown strictARP (no /configz) exposes no series rather than a guess.
	snap.Results[0].Findings = []check.Finding{kubeproxy.Finding{Mode: "iptables"}}
	if got := testutil.CollectAndCount(c, "ipvs_guard_kube_proxy_strict_arp"); got != 0 {
		t.Errorf("strict_arp series with unknown strictARP: got %d, want 0", got)
	}
}

func gatherCount(t *testing.T, reg prometheus.Gatherer, name string) int {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/version"
)

// Findings that publish a given state, as the checking packages' do.
func moduleFinding(m check.ModuleState) check.Finding { return stateFinding(check.State{Module: &m}) }

func arpFinding(a check.ARPState) check.Finding { return stateFinding(check.State{ARP: &a}) }

func modeFinding(mode string) check.Finding {
	return stateFinding(check.State{KubeProxy: &check.KubeProxyState{Mode: mode}})
}

func tableFinding(virtualServers, withoutReal int) check.Finding {
	return stateFinding(check.State{IPVSTable: &check.IPVSTableState{VirtualServers: virtualServers, WithoutRealServers: &withoutReal}})
}

// textFinding publishes no state.
type textFinding string

func (f textFinding) String() string { return string(f) }

func (textFinding) State() check.State { return check.State{} }

var testInfo = version.Info{Version: "v1.2.3", Commit: "abc", BuildDate: "2026-01-01T00:00:00Z", GoVersion: "go1.26.0", Platform: "linux/amd64"}

const buildInfoText = `
# HELP ipvs_guard_build_info Build information of the running ipvs-guard binary; the value is always 1.
# TYPE ipvs_guard_build_info gauge
ipvs_guard_build_info{build_date="2026-01-01T00:00:00Z",commit="abc",go_version="go1.26.0",platform="linux/amd64",version="v1.2.3"} 1
`

func TestCollector(t *testing.T) {
	tests := []struct {
		name    string
		snap    Snapshot
		metrics []string // restrict the comparison to these names (all when empty)
		want    string
	}{
		{
			name: "nothing run yet exposes only build info",
			want: buildInfoText,
		},
		{
			name: "nftables readiness and IPVS leftovers",
			snap: Snapshot{Results: []check.Result{
				{Name: check.NameNFTablesReadiness, Status: check.StatusProblem, Findings: []check.Finding{
					stateFinding(check.State{Readiness: &check.ReadinessState{Kind: "nft-expression", Severity: "blocker"}}),
					stateFinding(check.State{Readiness: &check.ReadinessState{Kind: "foreign-virtual-server", Severity: "change"}}),
					stateFinding(check.State{Readiness: &check.ReadinessState{Kind: "foreign-virtual-server", Severity: "change"}}),
				}},
				{Name: check.NameIPVSLeftovers, Status: check.StatusOK, Findings: []check.Finding{
					stateFinding(check.State{Leftover: &check.LeftoverState{Kind: "virtual-server"}}),
					stateFinding(check.State{Leftover: &check.LeftoverState{Kind: "virtual-server"}}),
					stateFinding(check.State{Leftover: &check.LeftoverState{Kind: "kube-ipvs0"}}),
				}},
			}},
			metrics: []string{"ipvs_guard_nftables_ready", "ipvs_guard_nftables_readiness_findings", "ipvs_guard_ipvs_leftovers"},
			want: `
# HELP ipvs_guard_ipvs_leftovers Number of things IPVS mode left behind once kube-proxy runs another mode, by kind (kube-ipvs0, virtual-server, ipset, sysctl, modules-load-file).
# TYPE ipvs_guard_ipvs_leftovers gauge
ipvs_guard_ipvs_leftovers{kind="kube-ipvs0"} 1
ipvs_guard_ipvs_leftovers{kind="virtual-server"} 2
# HELP ipvs_guard_nftables_ready Whether this node is ready for kube-proxy's nftables mode: 1 when the nftables-readiness report found no blocker, 0 when it found one; absent when the report has not run (an advisory: it feeds no Node condition).
# TYPE ipvs_guard_nftables_ready gauge
ipvs_guard_nftables_ready 0
# HELP ipvs_guard_nftables_readiness_findings Number of findings of the latest nftables-readiness report, by kind (kernel-version, nft-expression, foreign-virtual-server, …) and severity (blocker, change, info).
# TYPE ipvs_guard_nftables_readiness_findings gauge
ipvs_guard_nftables_readiness_findings{kind="foreign-virtual-server",severity="change"} 2
ipvs_guard_nftables_readiness_findings{kind="nft-expression",severity="blocker"} 1
`,
		},
		{
			name: "modules",
			snap: Snapshot{Results: []check.Result{{
				Name: check.NameModules, Status: check.StatusProblem,
				Findings: []check.Finding{
					moduleFinding(check.ModuleState{Module: "ip_vs", Loaded: true, Available: true, Declared: true}),
					moduleFinding(check.ModuleState{Module: "ip_vs_lc", Available: true}),
					moduleFinding(check.ModuleState{Module: "nf_conntrack", Loaded: true, Available: true, Declared: true}),
					moduleFinding(check.ModuleState{Module: "nf_conntrack_ipv4", Declared: true, Stale: true}),
					textFinding("ignored"),
					nil,
				},
			}}},
			metrics: []string{"ipvs_guard_modules_loaded", "ipvs_guard_modules_declared", "ipvs_guard_modules_available", "ipvs_guard_modules_stale_declaration", "ipvs_guard_check_status"},
			want: `
# HELP ipvs_guard_check_status Latest outcome of each check: 1 for the current status, 0 for the others.
# TYPE ipvs_guard_check_status gauge
ipvs_guard_check_status{check="modules",status="error"} 0
ipvs_guard_check_status{check="modules",status="ok"} 0
ipvs_guard_check_status{check="modules",status="problem"} 1
ipvs_guard_check_status{check="modules",status="skipped"} 0
# HELP ipvs_guard_modules_available Whether the running kernel ships a required module, on disk or built in (1), or not (0).
# TYPE ipvs_guard_modules_available gauge
ipvs_guard_modules_available{module="ip_vs"} 1
ipvs_guard_modules_available{module="ip_vs_lc"} 1
ipvs_guard_modules_available{module="nf_conntrack"} 1
ipvs_guard_modules_available{module="nf_conntrack_ipv4"} 0
# HELP ipvs_guard_modules_declared Whether a required kernel module is declared for loading at boot in modules-load.d (1) or not (0).
# TYPE ipvs_guard_modules_declared gauge
ipvs_guard_modules_declared{module="ip_vs"} 1
ipvs_guard_modules_declared{module="ip_vs_lc"} 0
ipvs_guard_modules_declared{module="nf_conntrack"} 1
ipvs_guard_modules_declared{module="nf_conntrack_ipv4"} 1
# HELP ipvs_guard_modules_loaded Whether a required kernel module is loaded or built in (1) or not (0).
# TYPE ipvs_guard_modules_loaded gauge
ipvs_guard_modules_loaded{module="ip_vs"} 1
ipvs_guard_modules_loaded{module="ip_vs_lc"} 0
ipvs_guard_modules_loaded{module="nf_conntrack"} 1
ipvs_guard_modules_loaded{module="nf_conntrack_ipv4"} 0
# HELP ipvs_guard_modules_stale_declaration Whether a module is declared for boot but absent from the running kernel (1) or not (0).
# TYPE ipvs_guard_modules_stale_declaration gauge
ipvs_guard_modules_stale_declaration{module="ip_vs"} 0
ipvs_guard_modules_stale_declaration{module="ip_vs_lc"} 0
ipvs_guard_modules_stale_declaration{module="nf_conntrack"} 0
ipvs_guard_modules_stale_declaration{module="nf_conntrack_ipv4"} 1
`,
		},
		{
			name: "arp results, responders and rtt",
			snap: Snapshot{Results: []check.Result{{
				Name: check.NameARP, Status: check.StatusProblem,
				Findings: []check.Finding{
					arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Service: "default/web", Result: "answered", Responders: 1, RTTSeconds: 0.0012}),
					arpFinding(check.ARPState{IP: "192.0.2.11", Family: "ipv4", Interface: "eth0", Result: "no-reply"}),
					arpFinding(check.ARPState{IP: "192.0.2.12", Family: "ipv4", Interface: "eth0", Result: "conflict", Responders: 2, RTTSeconds: 0.002}),
					arpFinding(check.ARPState{IP: "2001:db8::10", Family: "ipv6", Interface: "eth0", Result: "wrong-responder", Responders: 1, RTTSeconds: 0.0015}),
				},
			}}},
			metrics: []string{"ipvs_guard_arp_probe_result", "ipvs_guard_arp_responders", "ipvs_guard_arp_probe_rtt_seconds"},
			want: `
# HELP ipvs_guard_arp_probe_result Latest ARP (IPv4) or NDP (IPv6) probe result for a LoadBalancer IP this node probes: 1 for the current result, 0 for the others. service is the IP's Service (namespace/name), empty when unknown.
# TYPE ipvs_guard_arp_probe_result gauge
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="answered",service="default/web"} 1
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="conflict",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="no-reply",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="reply-from-down-interface",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="reply-from-other-interface",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.10",result="wrong-responder",service="default/web"} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="answered",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="conflict",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="no-reply",service=""} 1
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="reply-from-down-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="reply-from-other-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.11",result="wrong-responder",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.12",result="answered",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.12",result="conflict",service=""} 1
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.12",result="no-reply",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.12",result="reply-from-down-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.12",result="reply-from-other-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv4",interface="eth0",ip="192.0.2.12",result="wrong-responder",service=""} 0
ipvs_guard_arp_probe_result{family="ipv6",interface="eth0",ip="2001:db8::10",result="answered",service=""} 0
ipvs_guard_arp_probe_result{family="ipv6",interface="eth0",ip="2001:db8::10",result="conflict",service=""} 0
ipvs_guard_arp_probe_result{family="ipv6",interface="eth0",ip="2001:db8::10",result="no-reply",service=""} 0
ipvs_guard_arp_probe_result{family="ipv6",interface="eth0",ip="2001:db8::10",result="reply-from-down-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv6",interface="eth0",ip="2001:db8::10",result="reply-from-other-interface",service=""} 0
ipvs_guard_arp_probe_result{family="ipv6",interface="eth0",ip="2001:db8::10",result="wrong-responder",service=""} 1
# HELP ipvs_guard_arp_probe_rtt_seconds Round-trip time of the first reply to the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP (absent when nothing answered).
# TYPE ipvs_guard_arp_probe_rtt_seconds gauge
ipvs_guard_arp_probe_rtt_seconds{family="ipv4",interface="eth0",ip="192.0.2.10"} 0.0012
ipvs_guard_arp_probe_rtt_seconds{family="ipv4",interface="eth0",ip="192.0.2.12"} 0.002
ipvs_guard_arp_probe_rtt_seconds{family="ipv6",interface="eth0",ip="2001:db8::10"} 0.0015
# HELP ipvs_guard_arp_responders Number of distinct MAC addresses that answered the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP.
# TYPE ipvs_guard_arp_responders gauge
ipvs_guard_arp_responders{family="ipv4",interface="eth0",ip="192.0.2.10"} 1
ipvs_guard_arp_responders{family="ipv4",interface="eth0",ip="192.0.2.11"} 0
ipvs_guard_arp_responders{family="ipv4",interface="eth0",ip="192.0.2.12"} 2
ipvs_guard_arp_responders{family="ipv6",interface="eth0",ip="2001:db8::10"} 1
`,
		},
		{
			name: "kube-proxy mode, ipvs table and conditions",
			snap: Snapshot{
				Results: []check.Result{
					{Name: check.NameKubeProxy, Status: check.StatusProblem, Findings: []check.Finding{modeFinding("iptables")}},
					{Name: check.NameIPVS, Status: check.StatusOK, Findings: []check.Finding{tableFinding(7, 2)}},
				},
				Conditions: []Condition{
					{Type: "KubeProxyIPVSDegraded", Status: "True", Reason: "NotInIPVSMode"},
				},
			},
			metrics: []string{"ipvs_guard_kube_proxy_mode", "ipvs_guard_ipvs_virtual_servers", "ipvs_guard_ipvs_virtual_servers_without_real_servers", "ipvs_guard_node_condition_status", "ipvs_guard_node_condition_reason"},
			want: `
# HELP ipvs_guard_ipvs_virtual_servers Number of IPVS virtual servers in the node's table.
# TYPE ipvs_guard_ipvs_virtual_servers gauge
ipvs_guard_ipvs_virtual_servers 7
# HELP ipvs_guard_ipvs_virtual_servers_without_real_servers Number of IPVS virtual servers whose Service has ready endpoints but which have no real servers.
# TYPE ipvs_guard_ipvs_virtual_servers_without_real_servers gauge
ipvs_guard_ipvs_virtual_servers_without_real_servers 2
# HELP ipvs_guard_kube_proxy_mode The proxy mode kube-proxy reports on its metrics port; the value is always 1.
# TYPE ipvs_guard_kube_proxy_mode gauge
ipvs_guard_kube_proxy_mode{mode="iptables"} 1
# HELP ipvs_guard_node_condition_reason Current reason of each Node condition ipvs-guard owns; the value is always 1.
# TYPE ipvs_guard_node_condition_reason gauge
ipvs_guard_node_condition_reason{condition="KubeProxyIPVSDegraded",reason="NotInIPVSMode"} 1
# HELP ipvs_guard_node_condition_status Status of each Node condition ipvs-guard owns (True means a problem): 1 for the current status, 0 for the others.
# TYPE ipvs_guard_node_condition_status gauge
ipvs_guard_node_condition_status{condition="KubeProxyIPVSDegraded",status="False"} 0
ipvs_guard_node_condition_status{condition="KubeProxyIPVSDegraded",status="True"} 1
ipvs_guard_node_condition_status{condition="KubeProxyIPVSDegraded",status="Unknown"} 0
`,
		},
		{
			name: "a duplicate finding does not break the scrape",
			snap: Snapshot{Results: []check.Result{{
				Name: check.NameARP, Status: check.StatusOK,
				Findings: []check.Finding{
					arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Result: "no-reply"}),
					arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Result: "answered", Responders: 1}),
				},
			}}},
			metrics: []string{"ipvs_guard_arp_responders"},
			want: `
# HELP ipvs_guard_arp_responders Number of distinct MAC addresses that answered the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP.
# TYPE ipvs_guard_arp_responders gauge
ipvs_guard_arp_responders{family="ipv4",interface="eth0",ip="192.0.2.10"} 1
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollector(func() Snapshot { return tt.snap }, testInfo)
			if err := testutil.CollectAndCompare(c, strings.NewReader(tt.want), tt.metrics...); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestCollectorVanishes checks that an IP or module that leaves the results
// leaves /metrics too (the reason state is a collector, not a GaugeVec).
func TestCollectorVanishes(t *testing.T) {
	snap := Snapshot{Results: []check.Result{
		{Name: check.NameARP, Status: check.StatusProblem, Findings: []check.Finding{
			arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Result: "answered", Responders: 1}),
			arpFinding(check.ARPState{IP: "192.0.2.11", Family: "ipv4", Interface: "eth0", Result: "no-reply"}),
		}},
	}}
	c := newCollector(func() Snapshot { return snap }, testInfo)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if got, want := testutil.CollectAndCount(c, "ipvs_guard_arp_responders"), 2; got != want {
		t.Fatalf("responders series before: got %d, want %d", got, want)
	}
	// The Service behind 192.0.2.11 is deleted: the next results no longer probe it.
	snap = Snapshot{Results: []check.Result{
		{Name: check.NameARP, Status: check.StatusOK, Findings: []check.Finding{
			arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Result: "answered", Responders: 1}),
		}},
	}}
	want := `
# HELP ipvs_guard_arp_responders Number of distinct MAC addresses that answered the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP.
# TYPE ipvs_guard_arp_responders gauge
ipvs_guard_arp_responders{family="ipv4",interface="eth0",ip="192.0.2.10"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ipvs_guard_arp_responders"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(c, "ipvs_guard_arp_probe_result"); got != 6 {
		t.Errorf("probe result series after: got %d, want 6 (one IP × six results)", got)
	}
}

func TestCollectorLint(t *testing.T) {
	snap := Snapshot{Results: []check.Result{
		{Name: check.NameModules, Status: check.StatusOK, Findings: []check.Finding{moduleFinding(check.ModuleState{Module: "ip_vs", Loaded: true, Available: true, Declared: true})}},
		{Name: check.NameARP, Status: check.StatusOK, Findings: []check.Finding{arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Result: "answered", Responders: 1, RTTSeconds: 0.001})}},
	}}
	problems, err := testutil.CollectAndLint(newCollector(func() Snapshot { return snap }, testInfo))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestCollectorReconcileRuns(t *testing.T) {
	snap := Snapshot{Checks: []CheckRuns{
		{Name: check.NameModules, Runs: 3, Errors: 1, LastSuccess: time.Unix(1700000000, 500000000), LastDuration: 250 * time.Millisecond},
		{Name: check.NameARP}, // enabled, never ran
	}}
	want := `
# HELP ipvs_guard_reconcile_errors_total Number of check runs that could not complete (infrastructure errors such as EPERM on netlink), by check.
# TYPE ipvs_guard_reconcile_errors_total counter
ipvs_guard_reconcile_errors_total{check="arp"} 0
ipvs_guard_reconcile_errors_total{check="modules"} 1
# HELP ipvs_guard_reconcile_last_duration_seconds Duration of the latest check run, including any remediation, by check.
# TYPE ipvs_guard_reconcile_last_duration_seconds gauge
ipvs_guard_reconcile_last_duration_seconds{check="modules"} 0.25
# HELP ipvs_guard_reconcile_last_success_timestamp_seconds Unix time the last check run without an infrastructure error started, by check (absent before the first).
# TYPE ipvs_guard_reconcile_last_success_timestamp_seconds gauge
ipvs_guard_reconcile_last_success_timestamp_seconds{check="modules"} 1.7000000005e+09
# HELP ipvs_guard_reconcile_total Number of finished check runs by the reconcile loop, by check.
# TYPE ipvs_guard_reconcile_total counter
ipvs_guard_reconcile_total{check="arp"} 0
ipvs_guard_reconcile_total{check="modules"} 3
`
	c := newCollector(func() Snapshot { return snap }, testInfo)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"ipvs_guard_reconcile_total", "ipvs_guard_reconcile_errors_total",
		"ipvs_guard_reconcile_last_success_timestamp_seconds", "ipvs_guard_reconcile_last_duration_seconds"); err != nil {
		t.Error(err)
	}
}

// stateSamples holds one published state of every kind [check.State] has.
// TestEveryStateKindIsExposed fails when a kind is added to check.State
// without a sample here and metrics in the collector.
var stateSamples = map[string]check.State{
	"Module":        {Module: &check.ModuleState{Module: "ip_vs", Loaded: true}},
	"KubeProxy":     {KubeProxy: &check.KubeProxyState{Mode: "ipvs"}},
	"IPVSTable":     {IPVSTable: &check.IPVSTableState{VirtualServers: 1}},
	"ARP":           {ARP: &check.ARPState{IP: "192.0.2.1", Family: "ipv4", Interface: "eth0", Result: "answered", Responders: 1}},
	"KubeProxySync": {KubeProxySync: &check.KubeProxySyncState{IPFamily: "IPv4", LastSyncSeconds: 1, HealthTimeoutSeconds: 60}},
	"Advisory":      {Advisory: &check.AdvisoryState{Check: check.NameIPVSSysctls, Advisory: "IPVSTCPTimeoutBelowKeepalive", Severity: "warning"}},
	"Sysctl":        {Sysctl: &check.SysctlState{Name: "net.ipv4.vs.conn_reuse_mode", Value: 1}},
	"Conntrack":     {Conntrack: &check.ConntrackState{Entries: 10, Max: 100}},
	"Readiness":     {Readiness: &check.ReadinessState{Kind: "scheduler", Severity: "change"}},
	"Leftover":      {Leftover: &check.LeftoverState{Kind: "kube-ipvs0"}},
	"ARPPreference": {ARPPreference: &check.ARPPreferenceState{IP: "192.0.2.1", Service: "default/web", Announcer: "b", Preferred: "a"}},
	"LBIPConflict":  {LBIPConflict: &check.LBIPConflictState{IP: "192.0.2.1", Kind: "service", Owner: "default/a", Other: "default/b"}},
	"IPVSDrift":     {IPVSDrift: &check.IPVSDriftState{Findings: map[string]int{"stale-real-server": 1}, GoneBackendConnections: map[check.ServiceProtocol]int{{Service: "kube-system/kube-dns", Protocol: "UDP"}: 2}}},
}

// TestEveryStateKindIsExposed checks that every kind of state a finding can
// publish becomes metric families of its own, so a new kind of finding state
// cannot be silently dropped from /metrics.
func TestEveryStateKindIsExposed(t *testing.T) {
	base := families(t, Snapshot{Results: []check.Result{{Name: "sample", Status: check.StatusOK, Findings: []check.Finding{textFinding("text")}}}})
	seen := map[string]string{} // family -> kind
	fields := reflect.VisibleFields(reflect.TypeOf(check.State{}))
	if len(fields) != len(stateSamples) {
		t.Errorf("check.State has %d kinds, stateSamples %d: give every kind a sample", len(fields), len(stateSamples))
	}
	for _, f := range fields {
		t.Run(f.Name, func(t *testing.T) {
			st, ok := stateSamples[f.Name]
			if !ok {
				t.Fatalf("no sample of check.State.%s: add one and expose it in the collector", f.Name)
			}
			if v := reflect.ValueOf(st); v.FieldByIndex(f.Index).IsZero() {
				t.Fatalf("the sample of %s does not set it", f.Name)
			}
			var own []string
			for name := range families(t, Snapshot{Results: []check.Result{{Name: "sample", Status: check.StatusOK, Findings: []check.Finding{stateFinding(st)}}}}) {
				if !base[name] {
					own = append(own, name)
				}
			}
			if len(own) == 0 {
				t.Fatalf("check.State.%s is exposed as no metric", f.Name)
			}
			for _, name := range own {
				if other, dup := seen[name]; dup {
					t.Errorf("%s is exposed by both %s and %s", name, other, f.Name)
				}
				seen[name] = f.Name
			}
		})
	}
}

// families returns the names of the metric families the collector exposes for snap.
func families(t *testing.T, snap Snapshot) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newCollector(func() Snapshot { return snap }, testInfo)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		out[mf.GetName()] = true
	}
	return out
}

// TestCollectorOutsideLabelValues: label values from outside (a module name
// built from kube-proxy's scheduler, an interface name the kernel allows to
// hold any byte) never break a scrape: invalid UTF-8 is replaced with
// U+FFFD instead of panicking in Collect, and line breaks are escaped by the
// exposition format, so no label value forges a series line.
func TestCollectorOutsideLabelValues(t *testing.T) {
	snap := Snapshot{Results: []check.Result{
		{Name: check.NameModules, Status: check.StatusProblem, Findings: []check.Finding{
			moduleFinding(check.ModuleState{Module: "ip_vs_\xff\nipvs_guard_build_info 1"}),
		}},
		{Name: check.NameARP, Status: check.StatusProblem, Findings: []check.Finding{
			arpFinding(check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth\xfe0", Result: "no-reply"}),
		}},
	}}
	c := newCollector(func() Snapshot { return snap }, testInfo)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP ipvs_guard_arp_responders Number of distinct MAC addresses that answered the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP.
# TYPE ipvs_guard_arp_responders gauge
ipvs_guard_arp_responders{family="ipv4",interface="eth�0",ip="192.0.2.10"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ipvs_guard_arp_responders"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(c, "ipvs_guard_modules_loaded"); got != 1 {
		t.Errorf("module loaded series: got %d, want 1", got)
	}
}

// TestCollectorDataPlane: kube-proxy's sync freshness, the advisories, the
// sysctl values and the conntrack table as the checks publish them.
func TestCollectorDataPlane(t *testing.T) {
	snap := Snapshot{Results: []check.Result{
		{Name: check.NameKubeProxy, Status: check.StatusProblem, Findings: []check.Finding{
			stateFinding{KubeProxySync: &check.KubeProxySyncState{IPFamily: "IPv4", LastSyncSeconds: 1780000000, LastQueuedSeconds: 1780000070, HealthTimeoutSeconds: 60, Stale: true}},
			stateFinding{KubeProxySync: &check.KubeProxySyncState{IPFamily: "IPv6", LastSyncSeconds: 1780000075, HealthTimeoutSeconds: 60}},
		}},
		{Name: check.NameIPVSSysctls, Status: check.StatusOK, Findings: []check.Finding{
			stateFinding{Sysctl: &check.SysctlState{Name: "ipvs.timeout.tcp", Value: 900}, Advisory: &check.AdvisoryState{Check: check.NameIPVSSysctls, Advisory: "IPVSTCPTimeoutBelowKeepalive", Severity: "warning"}},
			stateFinding{Sysctl: &check.SysctlState{Name: "net.ipv4.tcp_keepalive_time", Value: 7200}},
		}},
		{Name: check.NameConntrack, Status: check.StatusOK, Findings: []check.Finding{stateFinding{Conntrack: &check.ConntrackState{Entries: 950, Max: 1000}}}},
	}}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newCollector(func() Snapshot { return snap }, testInfo)); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP ipvs_guard_advisory An advisory finding is present (always 1; absent when not): a setting that risks traffic without breaking it now. severity is info or warning.
# TYPE ipvs_guard_advisory gauge
ipvs_guard_advisory{advisory="IPVSTCPTimeoutBelowKeepalive",check="ipvs-sysctls",severity="warning"} 1
# HELP ipvs_guard_conntrack_entries Number of entries in the netfilter connection tracking table (net.netfilter.nf_conntrack_count).
# TYPE ipvs_guard_conntrack_entries gauge
ipvs_guard_conntrack_entries 950
# HELP ipvs_guard_conntrack_max Size limit of the netfilter connection tracking table (net.netfilter.nf_conntrack_max); at the limit, packets of new connections are dropped.
# TYPE ipvs_guard_conntrack_max gauge
ipvs_guard_conntrack_max 1000
# HELP ipvs_guard_kube_proxy_health_timeout_seconds kube-proxy's health timeout: twice its sync period, from /configz.
# TYPE ipvs_guard_kube_proxy_health_timeout_seconds gauge
ipvs_guard_kube_proxy_health_timeout_seconds 60
# HELP ipvs_guard_kube_proxy_sync_last_queued_timestamp_seconds Unix time kube-proxy last queued a sync of its rules (a Service or endpoint change), by IP family; later than the last sync means an update waits.
# TYPE ipvs_guard_kube_proxy_sync_last_queued_timestamp_seconds gauge
ipvs_guard_kube_proxy_sync_last_queued_timestamp_seconds{ip_family="IPv4"} 1.78000007e+09
# HELP ipvs_guard_kube_proxy_sync_last_timestamp_seconds Unix time kube-proxy last synced its rules, by IP family, as its /metrics reports (kubeproxy_sync_proxy_rules_last_timestamp_seconds).
# TYPE ipvs_guard_kube_proxy_sync_last_timestamp_seconds gauge
ipvs_guard_kube_proxy_sync_last_timestamp_seconds{ip_family="IPv4"} 1.78e+09
ipvs_guard_kube_proxy_sync_last_timestamp_seconds{ip_family="IPv6"} 1.780000075e+09
# HELP ipvs_guard_kube_proxy_sync_stale Whether an update has waited longer than kube-proxy's health timeout with no sync since (1) or not (0), by IP family (kube-proxy in IPVS mode only).
# TYPE ipvs_guard_kube_proxy_sync_stale gauge
ipvs_guard_kube_proxy_sync_stale{ip_family="IPv4"} 1
ipvs_guard_kube_proxy_sync_stale{ip_family="IPv6"} 0
# HELP ipvs_guard_sysctl_value Value of a sysctl an advisory check judges (net.ipv4.vs.*, net.ipv4.tcp_keepalive_time), or of an IPVS timeout in seconds (ipvs.timeout.tcp, ipvs.timeout.tcpfin, ipvs.timeout.udp).
# TYPE ipvs_guard_sysctl_value gauge
ipvs_guard_sysctl_value{sysctl="ipvs.timeout.tcp"} 900
ipvs_guard_sysctl_value{sysctl="net.ipv4.tcp_keepalive_time"} 7200
`
	names := []string{"ipvs_guard_advisory", "ipvs_guard_conntrack_entries", "ipvs_guard_conntrack_max", "ipvs_guard_kube_proxy_health_timeout_seconds",
		"ipvs_guard_kube_proxy_sync_last_queued_timestamp_seconds", "ipvs_guard_kube_proxy_sync_last_timestamp_seconds", "ipvs_guard_kube_proxy_sync_stale", "ipvs_guard_sysctl_value"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

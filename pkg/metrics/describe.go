// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// Family describes one exposed metric, for documentation.
type Family struct {
	// Name is the full metric name.
	Name string
	// Type is gauge, counter or histogram.
	Type string
	// Labels are the label names, sorted.
	Labels []string
	// Help is the metric's help text.
	Help string
}

// Describe lists every ipvs_guard_ metric, sorted by name, by gathering a
// registry fed with one sample of every state and activity (the chart README
// is generated from it).
func Describe() ([]Family, error) {
	strict, noReal := true, 0
	sample := func(name string, sts ...check.State) check.Result {
		r := check.Result{Name: name, Status: check.StatusOK}
		for _, st := range sts {
			r.Findings = append(r.Findings, stateFinding(st))
		}
		return r
	}
	snap := Snapshot{
		Results: []check.Result{
			sample(check.NameModules, check.State{Module: &check.ModuleState{Module: "ip_vs"}}),
			sample(check.NameKubeProxy, check.State{KubeProxy: &check.KubeProxyState{Mode: "ipvs", StrictARP: &strict}},
				check.State{KubeProxySync: &check.KubeProxySyncState{IPFamily: "IPv4", LastSyncSeconds: 1, LastQueuedSeconds: 1, HealthTimeoutSeconds: 60}}),
			sample(check.NameIPVS, check.State{IPVSTable: &check.IPVSTableState{VirtualServers: 1, WithoutRealServers: &noReal}}),
			{Name: check.NameARP, Status: check.StatusOK, Findings: []check.Finding{
				stateFinding(check.State{ARP: &check.ARPState{IP: "192.0.2.1", Interface: "eth0", Result: "answered", Responders: 1, RTTSeconds: 0.001, Failover: true, FailoverSeconds: 2}}),
				stateFinding(check.State{ARP: &check.ARPState{IP: "192.0.2.2", Interface: "eth0", Result: "no-reply", Service: "default/web", Cause: "NoL2Advertisement"}}),
				stateFinding(check.State{LBIPConflict: &check.LBIPConflictState{IP: "192.0.2.3", Kind: "service", Owner: "default/a", Other: "default/b"}}),
				stateFinding(check.State{ARPPreference: &check.ARPPreferenceState{IP: "192.0.2.1", Service: "default/web", Announcer: "b", Preferred: "a"}}),
			}},
			sample(check.NameIPVSSysctls, check.State{Sysctl: &check.SysctlState{Name: "net.ipv4.vs.conn_reuse_mode", Value: 1},
				Advisory: &check.AdvisoryState{Check: check.NameIPVSSysctls, Advisory: "IPVSTCPTimeoutBelowKeepalive", Severity: "warning"}}),
			sample(check.NameConntrack, check.State{Conntrack: &check.ConntrackState{Entries: 10, Max: 100}}),
			sample(check.NameNFTablesReadiness, check.State{Readiness: &check.ReadinessState{Kind: "scheduler", Severity: "change"}}),
			sample(check.NameIPVSLeftovers, check.State{Leftover: &check.LeftoverState{Kind: "kube-ipvs0"}}),
			sample(check.NameIPVSDataplane, check.State{IPVSDrift: &check.IPVSDriftState{Findings: map[string]int{"stale-real-server": 0}, GoneBackendConnections: map[check.ServiceProtocol]int{{Service: "kube-system/kube-dns", Protocol: "UDP"}: 1}}}),
		},
		Conditions: []Condition{{Type: "IPVSModulesMissing", Status: "False", Reason: "ModulesLoaded"}},
		Checks:     []CheckRuns{{Name: check.NameModules, Runs: 1, LastSuccess: time.Unix(1, 0)}},
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewCollector(func() Snapshot { return snap })); err != nil {
		return nil, err
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.ObserveCheck(snap.Results[3], nil, time.Millisecond)
	m.ObserveModuleLoad("ip_vs", nil)
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var out []Family
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), namespace+"_") || len(mf.GetMetric()) == 0 {
			continue
		}
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			if l.GetName() != "le" {
				labels = append(labels, l.GetName())
			}
		}
		sort.Strings(labels)
		out = append(out, Family{Name: mf.GetName(), Type: strings.ToLower(mf.GetType().String()), Labels: labels, Help: mf.GetHelp()})
	}
	if len(out) == 0 {
		return nil, errors.New("no ipvs_guard_ metrics gathered")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// stateFinding is a finding that publishes the given state (Describe's samples).
type stateFinding check.State

func (stateFinding) String() string { return "sample" }

func (f stateFinding) State() check.State { return check.State(f) }

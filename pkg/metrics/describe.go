// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
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
	snap := Snapshot{
		Results: []check.Result{
			{Name: check.NameModules, Status: check.StatusOK, Findings: []check.Finding{modules.Finding{Module: "ip_vs"}}},
			{Name: check.NameKubeProxy, Status: check.StatusOK, Findings: []check.Finding{sampleFinding{Mode: "ipvs", VirtualServers: 1, WithoutReal: 0}}},
			{Name: check.NameARP, Status: check.StatusOK, Findings: []check.Finding{arpcheck.Finding{IP: "192.0.2.1", Interface: "eth0", Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:01"}, RTTSeconds: 0.001}}},
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
	m.ObserveCheck(snap.Results[2], nil, time.Millisecond)
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

// sampleFinding has the JSON shape of the kube-proxy and IPVS findings.
type sampleFinding struct {
	Mode           string `json:"mode"`
	VirtualServers int    `json:"virtual_servers"`
	WithoutReal    int    `json:"virtual_servers_without_real_servers"`
}

func (sampleFinding) String() string { return "sample" }

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// Module load attempt results.
const (
	// LoadSucceeded labels a module load that worked.
	LoadSucceeded = "success"
	// LoadFailed labels a module load that failed.
	LoadFailed = "failure"
)

// Metrics holds the activity metrics that need an observation per event
// (histograms and the module load counter); run counts, errors and the last
// success come from the loop's own record through the [Collector]. Its
// methods are safe for concurrent use.
type Metrics struct {
	reconcileDuration *prometheus.HistogramVec
	moduleLoads       *prometheus.CounterVec
	arpProbeDuration  *prometheus.HistogramVec
	arpFailover       *prometheus.HistogramVec
}

// FailoverBuckets are the buckets of ipvs_guard_arp_failover_seconds: 0
// (no probe went unanswered) and sub-second moves, MetalLB's memberlist
// failover (a dead speaker is suspected within 1 s and declared dead 4–24 s
// later with memberlist's LAN defaults, then the new speaker sends its
// gratuitous ARP), up to the minutes a failover takes without memberlist
// (a Node going NotReady, a speaker pod deleted).
var FailoverBuckets = []float64{0, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600}

// NewMetrics creates the activity metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "reconcile", Name: "duration_seconds",
			Help:    "Duration of one check run by the reconcile loop, including any remediation, by check.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"check"}),
		moduleLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "modules", Name: "load_attempts_total",
			Help: "Number of kernel module load attempts by remediation, by module and result (success or failure).",
		}, []string{"module", "result"}),
		arpProbeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "arp", Name: "probe_duration_seconds",
			Help:    "Time from sending an ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP to its first reply, by family and result.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"family", "result"}),
	}
	m.arpFailover = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "arp", Name: "failover_seconds",
		Help:    "How long a LoadBalancer IP this node probes went unanswered when the MAC answering for it changed (0: no probe went unanswered), by family; its count is the number of such changes. Estimated from the check's probes, to within half the time between two probes.",
		Buckets: FailoverBuckets,
	}, []string{"family"})
	for _, c := range []prometheus.Collector{m.reconcileDuration, m.moduleLoads, m.arpProbeDuration, m.arpFailover} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering activity metrics: %w", err)
		}
	}
	return m, nil
}

// ObserveCheck records one run of a check: res is what it returned, err its
// infrastructure error, d how long it took. The round-trip times in ARP
// findings feed the probe duration histogram. [Instrument] calls it.
func (m *Metrics) ObserveCheck(res check.Result, err error, d time.Duration) {
	m.reconcileDuration.WithLabelValues(res.Name).Observe(d.Seconds())
	if err != nil {
		return
	}
	for _, f := range res.Findings {
		if a := findingState(f).ARP; a != nil && a.Result != "" && a.RTTSeconds > 0 {
			m.arpProbeDuration.WithLabelValues(a.Family, a.Result).Observe(a.RTTSeconds)
		}
		if a := findingState(f).ARP; a != nil && a.Failover {
			m.arpFailover.WithLabelValues(a.Family).Observe(a.FailoverSeconds)
		}
	}
}

// ObserveModuleLoad records one attempt to load module; err is its failure.
func (m *Metrics) ObserveModuleLoad(module string, err error) {
	result := LoadSucceeded
	if err != nil {
		result = LoadFailed
	}
	m.moduleLoads.WithLabelValues(module, result).Inc()
}

// NewRegistry returns the registry `ipvs-guard run` serves on /metrics with
// the Go runtime and process metrics and the activity [Metrics], which it also
// returns for [Instrument] and [CountingLoader]. Register the state
// [Collector] on it once the results store exists.
func NewRegistry() (*prometheus.Registry, *Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, fmt.Errorf("registering Go metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, fmt.Errorf("registering process metrics: %w", err)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, m, nil
}

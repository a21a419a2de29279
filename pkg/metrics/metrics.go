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

// Metrics holds the activity metrics: what the agent did, as opposed to the
// state the [Collector] reports. Its methods are safe for concurrent use.
type Metrics struct {
	reconcileTotal       *prometheus.CounterVec
	reconcileErrors      *prometheus.CounterVec
	reconcileDuration    *prometheus.HistogramVec
	reconcileLastSuccess *prometheus.GaugeVec
	moduleLoads          *prometheus.CounterVec
	arpProbeDuration     *prometheus.HistogramVec
}

// NewMetrics creates the activity metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reconcileTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "reconcile", Name: "total",
			Help: "Number of check runs by the reconcile loop, by check and outcome status.",
		}, []string{"check", "status"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "reconcile", Name: "errors_total",
			Help: "Number of check runs that could not complete (infrastructure errors such as EPERM on netlink), by check.",
		}, []string{"check"}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "reconcile", Name: "duration_seconds",
			Help:    "Duration of one check run by the reconcile loop, including any remediation, by check.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"check"}),
		reconcileLastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "reconcile", Name: "last_success_timestamp_seconds",
			Help: "Unix time of the last check run that completed without an infrastructure error, by check.",
		}, []string{"check"}),
		moduleLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "modules", Name: "load_attempts_total",
			Help: "Number of kernel module load attempts by remediation, by module and result (success or failure).",
		}, []string{"module", "result"}),
		arpProbeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "arp", Name: "probe_duration_seconds",
			Help:    "Time from sending an ARP probe of a LoadBalancer IP to its first reply (the whole window when none came), by result.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{
		m.reconcileTotal, m.reconcileErrors, m.reconcileDuration, m.reconcileLastSuccess,
		m.moduleLoads, m.arpProbeDuration,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering activity metrics: %w", err)
		}
	}
	return m, nil
}

// ObserveCheck records one run of a check by the reconcile loop: res is what
// it returned, err its infrastructure error (nil when it ran), d how long it
// took and now when it finished. ARP findings' round-trip times feed the probe
// duration histogram.
func (m *Metrics) ObserveCheck(res check.Result, err error, d time.Duration, now time.Time) {
	name := res.Name
	status := res.Status
	if err != nil || status == check.StatusError {
		status = check.StatusError
		m.reconcileErrors.WithLabelValues(name).Inc()
	} else {
		m.reconcileLastSuccess.WithLabelValues(name).Set(float64(now.UnixNano()) / 1e9)
	}
	m.reconcileTotal.WithLabelValues(name, string(status)).Inc()
	m.reconcileDuration.WithLabelValues(name).Observe(d.Seconds())
	if name == check.NameARP && err == nil {
		for _, a := range stateOf(res).arp {
			if a.RTTSeconds > 0 {
				m.arpProbeDuration.WithLabelValues(a.Result).Observe(a.RTTSeconds)
			}
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

// ObserveARPProbe records one ARP probe that ended with result after d. Use it
// when the prober reports probes itself; [Metrics.ObserveCheck] already
// records the round-trip times found in ARP results.
func (m *Metrics) ObserveARPProbe(result string, d time.Duration) {
	m.arpProbeDuration.WithLabelValues(result).Observe(d.Seconds())
}

// NewRegistry returns the registry `ipvs-guard run` serves on /metrics: Go
// runtime and process metrics, the state [Collector] over snapshot and the
// activity [Metrics], which it also returns for the loop to record into.
func NewRegistry(snapshot func() Snapshot) (*prometheus.Registry, *Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, fmt.Errorf("registering Go metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, fmt.Errorf("registering process metrics: %w", err)
	}
	if err := reg.Register(NewCollector(snapshot)); err != nil {
		return nil, nil, fmt.Errorf("registering state metrics: %w", err)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, m, nil
}

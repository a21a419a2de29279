// SPDX-License-Identifier: Apache-2.0

// Package metrics owns ipvs-guard's Prometheus metrics, all prefixed
// ipvs_guard_.
//
// State (modules loaded and declared, kube-proxy mode, IPVS virtual servers,
// per-IP ARP results, Node condition status, build info) is exposed by a
// [Collector] that turns the latest check results into const metrics on every
// scrape, so a module, IP or condition that vanishes from the results vanishes
// from /metrics too. It reads each finding's typed state through
// check.Finding's State method and imports no checking package: a new kind of
// state is a field of check.State plus its metric families here, and
// TestEveryStateKindIsExposed fails until both exist. Activity (reconcile runs, durations and errors, module
// load attempts, ARP probe durations) is plain counters and histograms created
// by [NewMetrics].
//
// Nothing is registered globally: callers pass a prometheus.Registerer (one
// prometheus.NewRegistry() made in main). This package must not run checks,
// talk to the API server or touch the node; it only reads what it is given.
package metrics

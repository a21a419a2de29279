// SPDX-License-Identifier: Apache-2.0

// Package check holds the result type every ipvs-guard check returns, the
// interface the agent loop and the diagnose command use to run checks, and
// the typed State each finding publishes for the metrics collector (so
// pkg/metrics reads no checking package's types).
//
// It owns no check itself and must not import any checking package: it is the
// shared vocabulary between checks (pkg/modules, pkg/ipvs, pkg/arpcheck, …) and
// their consumers (pkg/diagnose, the agent loop, pkg/nodestatus).
package check

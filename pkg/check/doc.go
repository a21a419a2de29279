// SPDX-License-Identifier: Apache-2.0

// Package check holds the result type every ipvs-guard check returns and the
// interface the agent loop and the diagnose command use to run checks.
//
// It owns no check itself and must not import any checking package: it is the
// shared vocabulary between checks (pkg/modules, pkg/ipvs, pkg/arpcheck, …) and
// their consumers (pkg/diagnose, the agent loop, pkg/nodestatus).
package check

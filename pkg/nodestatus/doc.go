// SPDX-License-Identifier: Apache-2.0

// Package nodestatus publishes ipvs-guard's findings on the agent's own Node:
// the four Node conditions of docs/design.md §4 (True means a problem), one
// events.k8s.io/v1 Event per condition transition, and the annotation that
// names this node's interface MACs.
//
// It owns the mapping from check results to conditions, the condition
// Manager (a strategic-merge patch of only its own condition types, no write
// when nothing changed, lastTransitionTime only on a status change, removal
// of conditions whose check is disabled, conflicts retried) and the narrow
// Client it writes through (its in-memory double is
// nodestatustest.FakeClient). It must not run checks, watch anything or
// decide when to reconcile: the agent loop does that and hands it desired
// state.
package nodestatus

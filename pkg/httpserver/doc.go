// SPDX-License-Identifier: Apache-2.0

// Package httpserver serves the agent's HTTP endpoints — /metrics, /healthz
// and /readyz — on one http.Server with timeouts, shut down when its context
// ends.
//
// It owns only the HTTP plumbing: what is healthy or ready is decided by the
// caller's check functions, and the metrics come from the caller's
// prometheus.Gatherer. It must not register metrics globally or exit the
// process; errors go back to the caller.
package httpserver

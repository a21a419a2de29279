// SPDX-License-Identifier: Apache-2.0

// Package server runs the agent's HTTP endpoints (/healthz, /readyz, and
// whatever else the caller mounts, such as /metrics) on one http.Server with
// timeouts, shut down when its context ends; over HTTPS (HTTP/1.1 only) with
// a certificate from files, re-read when they change, or a self-signed one
// generated in memory (tls.go).
//
// It owns no endpoint logic: probes are functions the caller passes in.
package server

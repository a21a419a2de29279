// SPDX-License-Identifier: Apache-2.0

// Package ipvsdrift compares what kube-proxy programmed in the IPVS table
// with what the cluster asks for, both ways: ghost virtual servers and
// kube-ipvs0 addresses that belong to no Service (and virtual servers that
// are not kube-proxy's at all), real servers that are no ready endpoint of
// their Service (stale) and ready endpoints with no real server (missing),
// real servers left at weight 0 past kube-proxy's graceful-termination
// window, and entries of the IPVS connection table that still point at a
// backend that is no longer an endpoint.
//
// The comparison itself is pure ([Compare]); the [Checker] reads the table,
// kube-ipvs0, the connection table and the cluster, holds findings back for
// the settle grace, and confirms every real-server finding against a fresh
// read of its Service's EndpointSlices before it counts (docs/scale.md
// states what those reads cost).
package ipvsdrift

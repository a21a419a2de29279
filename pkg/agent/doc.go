// SPDX-License-Identifier: Apache-2.0

// Package agent is ipvs-guard's node reconcile loop (`ipvs-guard run`).
//
// It owns the informers (Services, its own Node, the agents' peers
// Service's EndpointSlices, MetalLB ServiceL2Status when that CRD exists;
// the EndpointSlices of the few Services a verdict depends on are read on
// demand, endpoints.go), a rate-limited workqueue of a few fixed keys (one per check,
// and the Node) served by a worker per key, so a long ARP round never delays
// a module check, the resync ticker on an injected clock, and the wake-ups
// from the kernel (module add/remove uevents) and from inotify on the
// modules-load.d directories. Every sync re-reads current state and runs the
// injected check.Checkers; results go to a results.Store and, as Node
// conditions (computed and handed over as one step), to a status publisher
// that runs on its own, so the API server being down never stops local
// checks or remediation.
//
// ClusterView is the read-only view of cluster state (LoadBalancer ingress
// IPs, their announcing node, peers (nodes whose agent is ready)) that checks
// such as the ARP prober read from the informer caches, and the directory of
// the MACs each agent publishes on its Node, read on demand.
//
// It must not implement checks or write to the API server itself: checks
// live in their own packages and every write goes through pkg/nodestatus.
package agent

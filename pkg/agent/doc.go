// SPDX-License-Identifier: Apache-2.0

// Package agent is ipvs-guard's node reconcile loop (`ipvs-guard run`).
//
// It runs a rate-limited workqueue of a few fixed keys (one per check, and
// the Node) served by a worker per key, so a long ARP round never delays a
// module check; the resync ticker on an injected clock; and the wake-ups:
// changes in the cluster view (LoadBalancer Services, the peers, the own
// Node, MetalLB's ServiceL2Status), module add/remove uevents from the
// kernel (uevent.go, watch_linux.go) and inotify on the modules-load.d
// directories (inotify.go). Every sync re-reads current state and runs the
// injected check.Checkers; results go to a results.Store and, as Node
// conditions (computed and handed over as one step), to a status publisher
// that runs on its own, so the API server being down never stops local
// checks or remediation.
//
// The cluster state the checks read comes from pkg/clusterview, which the
// loop starts, stops and listens to; the checks come built from
// pkg/checkset. It must not implement checks, read the cluster itself or
// write to the API server: checks live in their own packages and every
// write goes through pkg/nodestatus.
package agent

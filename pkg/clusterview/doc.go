// SPDX-License-Identifier: Apache-2.0

// Package clusterview is the read-only view of the cluster that the checks
// need, shared by the agent loop and one-shot `diagnose`.
//
// View (view.go) serves from informer caches: the Services but headless
// ones, the agent's own Node, the EndpointSlices of the agents' peers
// Service (peers.go: the nodes ARP probes are sharded over, and the memo
// of which IPs this node probes) and MetalLB's ServiceL2Status once that
// CRD exists (l2.go). What is not watched is read on demand: the
// EndpointSlices of the few Services a verdict depends on (endpoints.go)
// and the MACs other agents publish on their Nodes (nodemacs.go). Cached
// objects are stripped to what the checks read (strip.go).
//
// It serves each check the interface that check declares: the ipvs check's
// Cluster (ipvscluster.go), the ARP check's targets (arptargets.go, with
// the unannounced-IP explanation of unannounced.go) and its MAC Directory.
// It must not run checks, decide when to reconcile or write to the API
// server.
package clusterview

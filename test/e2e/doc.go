// SPDX-License-Identifier: Apache-2.0

// Package e2e holds the end-to-end tier (build tag e2e, `make test-e2e`):
// the real kube-apiserver and etcd on the host, and inside the QEMU guest
// kernel the node "guest" with a real kube-proxy in IPVS mode and
// `ipvs-guard run` as its agent, reaching the API server over QEMU user
// networking. hack/e2e/run.sh boots the guest and runs the test; the test
// drives the scenarios through the API server and the guest's control
// endpoint and asserts on Node conditions, Events and the agent's /metrics.
//
// It owns no product code and must not be imported; it talks to the agent
// only the way a cluster does (API objects, the metrics port).
package e2e

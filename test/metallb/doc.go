// SPDX-License-Identifier: Apache-2.0

// Package metallb is the metallb test tier (build tag metallb, run by
// hack/metallb/test.sh): the real MetalLB v0.16.2 controller and speakers
// on a layer-2 segment of network namespaces on this host, each node with
// its own Node object, speaker, kube-ipvs0 stand-in and `ipvs-guard run`
// agent, against a real kube-apiserver; Prometheus scrapes the agents with
// the chart's alert rules and Alertmanager delivers to a webhook run by the
// test. See hack/metallb/README.md.
package metallb

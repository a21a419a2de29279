// SPDX-License-Identifier: Apache-2.0

// Package kubeproxy reads what kube-proxy actually runs with on this node:
// the mode from its metrics port (/proxyMode), its effective configuration
// (/configz, both the v1alpha1 shape of 1.36+ and the internal Go-field shape
// of 1.35 and older), its version (kubernetes_build_info on /metrics), the
// kube-ipvs0 dummy interface and its addresses (netlink), and the IPVS
// scheduler the other checks should assume ([ResolveScheduler]).
//
// It only reads: it never changes kube-proxy, its ConfigMap or an interface.
package kubeproxy

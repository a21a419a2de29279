// SPDX-License-Identifier: Apache-2.0

// Package ipvscheck owns the ipvs check: it compares the kernel's IPVS table
// (pkg/ipvs) with what kube-proxy should have programmed for the cluster's
// Services — every ClusterIP, LoadBalancer ingress IP and externalIP, per
// port and protocol, has a virtual server; a virtual server whose Service
// has ready endpoints (for this node, under Local traffic policies) has real
// servers; its scheduler is the configured one.
//
// The expectations and the comparison are pure functions over API objects
// and an ipvs.Table. NodePort virtual servers are not expected (they depend
// on kube-proxy's nodePortAddresses and the node's addresses), nor are
// Services kube-proxy ignores (service.kubernetes.io/service-proxy-name,
// headless, ExternalName) or LoadBalancer ingress with ipMode Proxy.
//
// It only reads: the API server (List) and the IPVS table.
package ipvscheck

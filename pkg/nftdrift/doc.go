// SPDX-License-Identifier: Apache-2.0

// Package nftdrift is the nftables-dataplane check: kube-proxy's nftables
// table (families ip and ip6, read over netlink, no nft binary) against the
// Services and EndpointSlices, the counterpart of
// pkg/ipvsdrift for kube-proxy's nftables mode (docs/design.md §3c). What
// kube-proxy should program for this node comes from ipvsdrift's model (the
// endpoint rules, the paged EndpointSlice summary); this package reads the
// kernel and compares. In iptables mode it checks that kube-proxy's chains
// (KUBE-SERVICES, KUBE-PROXY-CANARY) are present where iptables is the
// nf_tables backend.
//
// The reader speaks nf_tables netlink itself (github.com/mdlayher/netlink
// for the socket): github.com/google/nftables v0.3.0 neither dumps a table's
// rules in one request nor gives set handles, and both are what keeps a
// re-read of 10,000 Services cheap (Reader).
package nftdrift

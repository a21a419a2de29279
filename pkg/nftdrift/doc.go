// SPDX-License-Identifier: Apache-2.0

// Package nftdrift is the nftables-dataplane check: kube-proxy's nftables
// table (families ip and ip6, read over netlink with github.com/google/nftables,
// no nft binary) against the Services and EndpointSlices, the counterpart of
// pkg/ipvsdrift for kube-proxy's nftables mode (docs/design.md §3c). What
// kube-proxy should program for this node comes from ipvsdrift's model (the
// endpoint rules, the paged EndpointSlice summary); this package reads the
// kernel and compares. In iptables mode it checks that kube-proxy's chains
// (KUBE-SERVICES, KUBE-PROXY-CANARY) are present where iptables is the
// nf_tables backend.
package nftdrift

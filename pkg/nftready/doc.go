// SPDX-License-Identifier: Apache-2.0

// Package nftready answers two questions about the way off kube-proxy's
// IPVS mode (docs/design.md §3b, docs/migrate-to-nftables.md).
//
// Before the switch, the nftables-readiness check says whether this node can
// run kube-proxy in nftables mode and what the switch changes: the kernel
// proves it runs kube-proxy's nf_tables expressions (a throwaway table built
// over netlink in a private network namespace, never the host's rules),
// module blacklists and kernel.modules_disabled, kube-proxy's version, the
// IPVS settings nftables mode does not have, virtual servers that are not
// kube-proxy's, NodePorts reached on non-primary addresses, Service IPs that
// stop being local, NodeLocal DNSCache and Calico.
//
// After the switch, the ipvs-leftovers check lists what IPVS mode left on
// the node (kube-ipvs0, virtual servers, KUBE-* ipsets, the strict-ARP and
// net.ipv4.vs.* sysctls, the modules-load.d file ipvs-guard wrote), each
// with the commands that remove it.
//
// Both are advisories: neither feeds a Node condition.
//
// While kube-proxy runs in nftables mode, the nftables-prerequisites check
// keeps the kernel side of the readiness report true: every module
// kube-proxy's rules need, conntrack included, is loaded or built in, or
// shipped, not blocked by modprobe.d and not stopped by
// kernel.modules_disabled, and a loaded one is not blocked for the next
// boot. It feeds KubeProxyDataplaneDegraded. Both share kernel.go.
package nftready

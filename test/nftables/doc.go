// SPDX-License-Identifier: Apache-2.0

// Package nftables is the nftables tier (hack/test-nftables.sh): the real
// kube-proxy v1.37.1 in nftables mode on this host's kernel, in a private
// network namespace with a real API server, against the kube-proxy-sync and
// nftables-dataplane checks, with faults made for real; and kube-proxy in
// iptables mode over iptables-nft (its chains present).
package nftables

// SPDX-License-Identifier: Apache-2.0

// Package arpcheck proves that LoadBalancer IPs answer address resolution on
// this node's layer-2 segment (docs/design.md §3.6): ARP for IPv4 addresses,
// neighbour discovery (NDP: solicitations to the solicited-node multicast
// group, advertisements back) for IPv6 ones. It sends requests for many IPs
// at once on one AF_PACKET socket per interface and family, collects every
// responder within a reply window and classifies each IP the same way in
// both families: answered, no-reply, conflict (several MACs),
// wrong-responder (a MAC other than the expected announcer's), or the
// announcer's own MAC of the wrong way: reply-from-other-interface (not an
// interface MetalLB announces on), reply-from-down-interface. The checker
// follows the answering MAC of each IP across runs (history.go): a change
// is a failover, timed by the probes left unanswered around it, and more
// than FlapThreshold changes an hour is flapping.
//
// It owns frame construction and parsing (pure: ARP in frame.go, ICMPv6
// neighbour messages in ndp.go), the classification (pure classify), the
// Prober (over an injectable packet connection, so it is tested without
// root) and the arp Checker, whose findings carry each IP's family. The host
// side (route lookup through netlink, AF_PACKET sockets) lives in
// network_linux.go; other platforms get [ErrNotSupported].
//
// Observed kernel behaviour (netns tier on this host's kernel with an ifb
// device, guest tier on Debian's 6.1 with a real dummy kube-ipvs0): Linux
// answers a neighbour solicitation only for an address on the receiving
// interface, so an IPv6 VIP on kube-ipvs0 is never answered by the node's
// kernel, whatever arp_ignore (IPv4 only), forwarding or the device's state;
// only MetalLB's speaker answers it. There is no IPv6 counterpart of strict
// ARP to check.
//
// It must not decide which IPs to probe (callers feed a [TargetSource]; the
// shard subpackage picks the IPs a node judges), must not talk to the
// Kubernetes API, and must not change anything on the node: it only sends
// ARP requests and neighbour solicitations.
package arpcheck

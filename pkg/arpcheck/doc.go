// SPDX-License-Identifier: Apache-2.0

// Package arpcheck proves that LoadBalancer IPs answer ARP on this node's
// layer-2 segment (DESIGN §3.6): it sends ARP requests for many IPs at once on
// one AF_PACKET socket per interface, collects every responder within a reply
// window and classifies each IP as answered, no-reply, conflict (several
// MACs) or wrong-responder (a MAC other than the expected announcer's).
//
// It owns ARP frame construction and parsing (pure, in frame.go), the
// classification (pure classify), the Prober (over an injectable packet
// connection, so it is tested without root) and the arp Checker. The host
// side (route lookup through netlink, AF_PACKET sockets) lives in
// network_linux.go; other platforms get [ErrNotSupported].
//
// It must not decide which IPs to probe (callers feed a [TargetSource]; the
// shard subpackage picks the IPs a node judges), must not talk to the
// Kubernetes API, and must not change anything on the node: it only sends ARP
// requests.
package arpcheck

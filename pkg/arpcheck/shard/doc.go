// SPDX-License-Identifier: Apache-2.0

// Package shard decides which nodes ARP-probe which LoadBalancer IPs, so
// cluster-wide ARP traffic grows with the number of IPs, not nodes × IPs
// (docs/design.md §3.6). Each IP is probed by k nodes chosen by rendezvous (highest
// random weight) hashing over the names of the nodes that run the agent; the node announcing an
// IP never judges it, the next-ranked node takes its place.
//
// Every function is pure: the same inputs give the same answer on every node,
// with no coordination. The package must not read nodes or Services itself;
// the agent passes its peers' names and each IP's announcer.
package shard

// SPDX-License-Identifier: Apache-2.0

// Package arpsysctl owns the arp-sysctls check: whether this node's
// net.ipv4.conf.{all,<iface>}.arp_ignore and arp_announce keep it from
// answering ARP for the LoadBalancer IPs kube-proxy binds to kube-ipvs0
// (what kube-proxy's --ipvs-strict-arp / MetalLB's strictARP ensure).
//
// Kernel semantics (Documentation/networking/ip-sysctl.rst, net/ipv4/arp.c):
// for both sysctls the value in force on an interface is
// max(conf/all, conf/<iface>). An ARP request for an address held only by
// kube-ipvs0 arrives on another interface, so it is answered unless the
// effective arp_ignore is 1 (reply only for addresses on the incoming
// interface), 2 (… and sender in the same subnet) or 8 (never reply); 0, 3
// (scope-host filter only: kube-ipvs0 addresses are global) and the reserved
// 4–7 all reply. arp_announce must be exactly 2 (always pick the best local
// source address); values above 2 behave like 0.
//
// It reads files under a hostfs root and never writes a sysctl.
package arpsysctl

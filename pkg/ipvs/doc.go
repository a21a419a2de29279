// SPDX-License-Identifier: Apache-2.0

// Package ipvs reads the kernel's IPVS table (virtual servers and their real
// servers) through a small read-only [Interface], with the project's own
// [VirtualServer] and [RealServer] types converted from github.com/moby/ipvs
// in pure functions. Virtual servers are dumped through moby/ipvs; real
// servers come from one read of /proc/net/ip_vs (the whole table: netlink
// has no dump of every destination), and, for a virtual server that file
// does not list or when it cannot be read, from one netlink dump per virtual
// server through a lean blocking socket of this package decoded into
// moby/ipvs's Destination.
//
// It owns the moby/ipvs v1.1.0 traps: it never lets that library exec
// `modprobe` (nothing here may load a module), it checks that ip_vs is loaded
// before trusting an empty table ([ErrModuleNotLoaded]), and it re-resolves
// the IPVS generic-netlink family on every read so that an ip_vs unload and
// reload under a running process is survived. It must not write to the IPVS
// table, and it knows nothing of Kubernetes.
package ipvs

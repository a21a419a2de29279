// SPDX-License-Identifier: Apache-2.0

package shard

import (
	"net/netip"
	"sort"
)

// DefaultK is how many nodes probe each IP.
const DefaultK = 2

// IP is a LoadBalancer IP and the node announcing it ("" when unknown).
type IP struct {
	// Addr is the address.
	Addr netip.Addr
	// Announcer is the node that answers ARP for Addr (MetalLB's
	// ServiceL2Status); it is never chosen to probe Addr.
	Announcer string
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// nodeSeed is the FNV-1a state after hashing a node name and a separator, so
// scoring an IP against many nodes hashes each name only once.
func nodeSeed(node string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(node); i++ {
		h ^= uint64(node[i])
		h *= fnvPrime
	}
	h ^= 0xff // separator: no name byte sequence can collide with name+IP
	h *= fnvPrime
	return h
}

// score is the rendezvous weight of (node, ip): FNV-1a over the IP's bytes
// continuing from the node seed, then the splitmix64 finaliser so that
// nearby addresses spread evenly.
func score(seed uint64, ip netip.Addr) uint64 {
	h := seed
	b := ip.As16()
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// candidate is one node's weight for an IP.
type candidate struct {
	node  string
	score uint64
}

// better orders candidates: higher score first, then name, so ties are
// broken the same way everywhere.
func better(a, b candidate) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.node < b.node
}

// Probers returns the k nodes (fewer if there are not enough) that probe ip,
// best first, never including announcer. nodes are the prober nodes' names (the agent passes its peers);
// duplicates count once. k < 1 means DefaultK.
func Probers(ip netip.Addr, nodes []string, k int, announcer string) []string {
	return NewAssigner(nodes, k).Probers(IP{Addr: ip, Announcer: announcer})
}

// insertTop keeps the k best distinct candidates in top, best first.
func insertTop(top []candidate, c candidate, k int) []candidate {
	for _, t := range top {
		if t.node == c.node {
			return top
		}
	}
	i := sort.Search(len(top), func(i int) bool { return better(c, top[i]) })
	if i >= k {
		return top
	}
	top = append(top, candidate{})
	copy(top[i+1:], top[i:])
	top[i] = c
	if len(top) > k {
		top = top[:k]
	}
	return top
}

// Assigner answers "which IPs does this node probe" for one set of prober
// nodes, hashing each node name once. It is immutable after NewAssigner and
// safe for concurrent use.
type Assigner struct {
	nodes []string
	seeds []uint64
	k     int
}

// NewAssigner prepares sharding over the prober nodes' names (duplicates
// count once) with k probers per IP (k < 1 means DefaultK).
func NewAssigner(nodes []string, k int) *Assigner {
	if k < 1 {
		k = DefaultK
	}
	seen := make(map[string]bool, len(nodes))
	a := &Assigner{k: k}
	for _, n := range nodes {
		if seen[n] {
			continue
		}
		seen[n] = true
		a.nodes = append(a.nodes, n)
		a.seeds = append(a.seeds, nodeSeed(n))
	}
	return a
}

// Probers returns the nodes that probe ip, as the package-level Probers does.
func (a *Assigner) Probers(ip IP) []string {
	addr := ip.Addr.Unmap()
	top := make([]candidate, 0, a.k+1)
	for i, n := range a.nodes {
		if n == ip.Announcer {
			continue
		}
		top = insertTop(top, candidate{node: n, score: score(a.seeds[i], addr)}, a.k)
	}
	out := make([]string, len(top))
	for i, c := range top {
		out[i] = c.node
	}
	return out
}

// For returns the IPs node must probe, in input order. A node that is not
// among the prober nodes probes nothing.
func (a *Assigner) For(node string, ips []IP) []netip.Addr {
	self := -1
	for i, n := range a.nodes {
		if n == node {
			self = i
			break
		}
	}
	if self < 0 {
		return nil
	}
	var out []netip.Addr
	for _, ip := range ips {
		if ip.Announcer == node {
			continue
		}
		addr := ip.Addr.Unmap()
		mine := candidate{node: node, score: score(a.seeds[self], addr)}
		// node probes ip when fewer than k other eligible nodes beat it.
		beaten := 0
		for i, n := range a.nodes {
			if i == self || n == ip.Announcer {
				continue
			}
			if better(candidate{node: n, score: score(a.seeds[i], addr)}, mine) {
				beaten++
				if beaten >= a.k {
					break
				}
			}
		}
		if beaten < a.k {
			out = append(out, ip.Addr)
		}
	}
	return out
}

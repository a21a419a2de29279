// SPDX-License-Identifier: Apache-2.0

package shard

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%04d", i)
	}
	return out
}

func lbIPs(n int) []IP {
	out := make([]IP, n)
	for i := range out {
		out[i] = IP{Addr: netip.AddrFrom4([4]byte{10, 20, byte(i >> 8), byte(i)})}
	}
	return out
}

func TestProbers(t *testing.T) {
	vip := netip.MustParseAddr("10.20.0.1")
	three := []string{"a", "b", "c"}
	all := Probers(vip, three, 3, "")
	tests := []struct {
		name      string
		nodes     []string
		k         int
		announcer string
		want      []string
	}{
		{name: "no nodes", nodes: nil, k: 2, want: []string{}},
		{name: "fewer nodes than k", nodes: []string{"a"}, k: 2, want: []string{"a"}},
		{name: "top two of the ranking", nodes: three, k: 2, want: all[:2]},
		{name: "k below 1 means the default", nodes: three, k: 0, want: all[:DefaultK]},
		{name: "announcer excluded, next one picked", nodes: three, k: 2, announcer: all[0], want: all[1:3]},
		{name: "announcer not among nodes changes nothing", nodes: three, k: 2, announcer: "zz", want: all[:2]},
		{name: "only the announcer", nodes: []string{"a"}, k: 2, announcer: "a", want: []string{}},
		{name: "duplicate names count once", nodes: []string{"a", "a", "b", "c", "b"}, k: 3, want: all},
		{name: "order of nodes does not matter", nodes: []string{"c", "a", "b"}, k: 2, want: all[:2]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Probers(vip, tt.nodes, tt.k, tt.announcer)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Probers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStability checks the property rendezvous hashing is chosen for: when a
// node leaves, only the IPs it probed move, and each moves to one new node.
func TestStability(t *testing.T) {
	nodes := nodeNames(50)
	ips := lbIPs(400)
	before := NewAssigner(nodes, 2)
	gone := nodes[17]
	after := NewAssigner(slices.Delete(slices.Clone(nodes), 17, 18), 2)
	for _, ip := range ips {
		b, a := before.Probers(ip), after.Probers(ip)
		if !slices.Contains(b, gone) {
			if !slices.Equal(a, b) {
				t.Errorf("%s: probers changed from %v to %v though %s did not probe it", ip.Addr, b, a, gone)
			}
			continue
		}
		kept := 0
		for _, n := range b {
			if slices.Contains(a, n) {
				kept++
			}
		}
		if kept != len(b)-1 {
			t.Errorf("%s: %v → %v, want only %s replaced", ip.Addr, b, a, gone)
		}
	}
}

// TestForMatchesProbers checks that each node's own view (For) agrees with
// the global assignment, so the cluster probes every IP exactly k times.
func TestForMatchesProbers(t *testing.T) {
	nodes := nodeNames(40)
	ips := lbIPs(300)
	for i := range ips {
		if i%3 == 0 {
			ips[i].Announcer = nodes[i%len(nodes)]
		}
	}
	for _, k := range []int{1, 2, 3} {
		a := NewAssigner(nodes, k)
		count := map[netip.Addr]int{}
		for _, n := range nodes {
			for _, addr := range a.For(n, ips) {
				count[addr]++
			}
		}
		for _, ip := range ips {
			probers := a.Probers(ip)
			if len(probers) != k {
				t.Fatalf("k=%d: %s has %d probers", k, ip.Addr, len(probers))
			}
			if slices.Contains(probers, ip.Announcer) {
				t.Errorf("k=%d: %s is judged by its announcer %s", k, ip.Addr, ip.Announcer)
			}
			if count[ip.Addr] != k {
				t.Errorf("k=%d: %s probed by %d nodes according to For, want %d", k, ip.Addr, count[ip.Addr], k)
			}
			for _, n := range probers {
				if !slices.Contains(a.For(n, []IP{ip}), ip.Addr) {
					t.Errorf("k=%d: Probers names %s for %s but For(%s) disagrees", k, n, ip.Addr, n)
				}
			}
		}
	}
	if got := NewAssigner(nodes, 2).For("not-a-ready-node", ips); got != nil {
		t.Errorf("an unknown node probes %v", got)
	}
}

// TestBalance checks that the load is spread: with 100 nodes, 2000 IPs and
// k=2 each node probes 40 on average; none should be far off.
func TestBalance(t *testing.T) {
	nodes := nodeNames(100)
	ips := lbIPs(2000)
	a := NewAssigner(nodes, 2)
	load := map[string]int{}
	for _, ip := range ips {
		for _, n := range a.Probers(ip) {
			load[n]++
		}
	}
	for _, n := range nodes {
		if load[n] < 15 || load[n] > 70 {
			t.Errorf("%s probes %d IPs, want about 40", n, load[n])
		}
	}
}

// BenchmarkClusterARPRate computes, for 1,000 Ready nodes and 500
// LoadBalancer IPs, which IPs every node probes (what each agent does once
// per interval), and reports the ARP request rate the whole cluster sends at
// a 10 s interval with one request per probe (an answering IP needs one;
// a silent one up to the prober's attempts), against the target k × IPs / interval
// and against every node probing every IP.
func BenchmarkClusterARPRate(b *testing.B) {
	const (
		nNodes   = 1000
		nIPs     = 500
		k        = DefaultK
		interval = 10.0 // seconds
	)
	nodes := nodeNames(nNodes)
	ips := lbIPs(nIPs)
	for i := range ips {
		ips[i].Announcer = nodes[(i*7)%nNodes]
	}
	a := NewAssigner(nodes, k)
	var probes int
	b.ResetTimer()
	for b.Loop() {
		probes = 0
		for _, ip := range ips {
			probes += len(a.Probers(ip))
		}
	}
	b.StopTimer()
	// Cross-check with the per-node view on a sample of nodes.
	sample := 0
	for _, n := range nodes[:50] {
		sample += len(a.For(n, ips))
	}
	b.ReportMetric(float64(probes)/interval, "frames/s")
	b.ReportMetric(float64(k*nIPs)/interval, "target-frames/s")
	b.ReportMetric(float64(nNodes*nIPs)/interval, "unsharded-frames/s")
	b.ReportMetric(float64(sample)/50, "ips/node")
}

// BenchmarkAssignerFor is one agent's sharding cost per interval: which of
// 500 IPs it probes among 1,000 nodes.
func BenchmarkAssignerFor(b *testing.B) {
	nodes := nodeNames(1000)
	ips := lbIPs(500)
	a := NewAssigner(nodes, DefaultK)
	for b.Loop() {
		_ = a.For(nodes[123], ips)
	}
}

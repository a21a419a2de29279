// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
)

// BenchmarkCompare10000 is the user-space part of the nftables-dataplane
// check's resync on a node of 10,000 Services × 3 ready endpoints (the
// table already read): most of a resync once the reader follows the
// change feed (docs/benchmarks.md).
func BenchmarkCompare10000(b *testing.B) {
	const n = 10000
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	t := Table{Family: "ip", Present: true, Chains: map[string]bool{ChainServices: true}, Maps: map[string]bool{},
		ServiceIPs: map[ServiceKey]string{}, NodePorts: map[PortKey]string{}, NoEndpoint: map[ServiceKey]string{},
		DNAT: map[string][]netip.AddrPort{}, Rules: map[string]int{}}
	for _, c := range BaseChains {
		t.Chains[c] = true
	}
	for _, m := range VerdictMaps {
		t.Maps[m] = true
	}
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		cip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		svcs = append(svcs, svc(name, cip.String(), corev1.ServiceTypeClusterIP, 0, ""))
		var ips []string
		chain := fmt.Sprintf("service-%08d-default/%s/tcp/http", i, name)
		for j := range 3 {
			ep := netip.AddrFrom4([4]byte{10, byte(244 + j), byte(i >> 8), byte(i)})
			ips = append(ips, ep.String())
			t.DNAT[chain] = append(t.DNAT[chain], netip.AddrPortFrom(ep, 8080))
		}
		slices = append(slices, eps(name, ips...))
		t.ServiceIPs[ServiceKey{cip, "tcp", 80}] = chain
		t.Chains[chain] = true
		t.Rules[chain] = 1
	}
	in := Input{Tables: []Table{t}, Services: svcs, Endpoints: ipvsdrift.Summarize(slices), Node: "n1"}
	if f := Compare(in); len(f) != 0 {
		b.Fatalf("%d findings, want none: %v", len(f), f[0])
	}
	b.ReportAllocs()
	for b.Loop() {
		Compare(in)
	}
}

// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck/ipvschecktest"
)

// BenchmarkReadiness10000 is the report's own work on the 10,000-Service
// node natively: the table of 10,000 virtual servers compared with 10,000
// Services, 10,000 kube-ipvs0 addresses, and 100,000 connections walked
// (the kernel reads are the fakes', measured in the guest tier).
func BenchmarkReadiness10000(b *testing.B) {
	const n = 10000
	cfg := readyConfig()
	cfg.Cluster = ipvschecktest.NewCluster(n)
	cfg.IPVS = ipvschecktest.Static(ipvschecktest.NewTable(n))
	dummy := Link{Name: "kube-ipvs0"}
	for i := range n {
		dummy.Addrs = append(dummy.Addrs, ipvschecktest.VIP(i))
	}
	cfg.Host.Links = func() ([]Link, error) {
		return []Link{{Name: "eth0", Addrs: []netip.Addr{nodeIP}}, {Name: "eth1", Addrs: []netip.Addr{secondIP}}, dummy}, nil
	}
	conns := ipvs.ConnCounts{}
	for i := range 100000 {
		k := ipvs.ConnKey{Virtual: ipvs.Key{Address: ipvschecktest.VIP(i % n), Protocol: ipvs.TCP, Port: ipvschecktest.Port},
			Real: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), 8080)}
		conns[k]++
	}
	cfg.Host.Connections = func(func(ipvs.ConnKey) bool) (ipvs.ConnCounts, error) { return conns, nil }
	c := NewReadinessChecker(cfg)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := c.Run(context.Background())
		if err != nil || len(res.Findings) != 1 {
			b.Fatalf("%v %v", res.Findings, err)
		}
	}
}

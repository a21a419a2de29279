// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"net"
	"slices"

	"github.com/ipvs-guard/ipvs-guard/pkg/agent"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// clusterARPTargets is the agent's ARP target source: the IPv4 LoadBalancer
// ingress IPs this node must probe (rendezvous sharding over the Ready
// nodes, never an IP this node announces), each with the announcing node and
// its published MACs.
func clusterARPTargets(view *agent.ClusterView, node string) arpcheck.TargetSource {
	return func(context.Context) ([]arpcheck.Target, error) {
		ings, err := view.LoadBalancerIngresses()
		if err != nil {
			return nil, err
		}
		ready, err := view.ReadyNodes()
		if err != nil {
			return nil, err
		}
		assign := shard.NewAssigner(ready, shard.DefaultK)
		var out []arpcheck.Target
		for _, in := range ings {
			if !in.IP.Is4() || in.AnnouncingNode == node {
				continue
			}
			if !slices.Contains(assign.Probers(shard.IP{Addr: in.IP, Announcer: in.AnnouncingNode}), node) {
				continue
			}
			out = append(out, arpcheck.Target{
				IP:           in.IP,
				ExpectedNode: in.AnnouncingNode,
				ExpectedMACs: view.NodeMACs(in.AnnouncingNode),
				Service:      in.Service.String(),
			})
		}
		return out, nil
	}
}

// withClusterARP replaces the arp check built from --probe-ip by one over
// the cluster's LoadBalancer IPs, unless --probe-ip was given.
func (o *checkOptions) withClusterARP(cs []check.Checker, view *agent.ClusterView, node string) ([]check.Checker, error) {
	if len(o.probeIPs) > 0 {
		return cs, nil
	}
	arp, err := arpcheck.NewChecker(arpcheck.CheckerOptions{
		Targets: clusterARPTargets(view, node),
		NodeForMAC: func(mac net.HardwareAddr) (string, bool) {
			n, _, ok := view.NodeForMAC(mac)
			return n, ok
		},
	})
	if err != nil {
		return nil, err
	}
	out := slices.Clone(cs)
	for i, c := range out {
		if c.Name() == check.NameARP {
			out[i] = arp
			return out, nil
		}
	}
	return append(out, arp), nil
}

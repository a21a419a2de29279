// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"slices"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
)

// ARPTargets is the ARP check's target source over the view: the
// LoadBalancer ingress IPs this node must probe (IPv4 with ARP, IPv6 with
// NDP), each with the announcing node (ServiceL2Status); the MACs that node
// published are read when a reply needs them (MACDirectory). An IP this node
// announces itself, or may be announcing while MetalLB moves it (see
// LoadBalancerIngress.Contenders), is never judged by it. With k > 0 the
// IPs are sharded by rendezvous hashing over the peers (Peers) so that each
// is probed by k nodes (the agent); with k <= 0 every IP is probed (a one-shot diagnose).
// Which IPs are this node's is remembered per set of peers, so a run hashes
// only IPs it has not seen with the current peers.
func (v *View) ARPTargets(k int) arpcheck.TargetSource {
	return func(ctx context.Context) ([]arpcheck.Target, error) {
		ings, err := v.LoadBalancerIngresses()
		if err != nil {
			return nil, err
		}
		probes := func(shard.IP) bool { return true }
		if k > 0 {
			peers, err := v.Peers()
			if err != nil {
				return nil, err
			}
			var done func()
			probes, done = v.peers.memo.filter(peers, k, v.nodeName)
			defer done()
		}
		var out []arpcheck.Target
		for _, in := range ings {
			if !in.IP.IsValid() || in.AnnouncingNode == v.nodeName || slices.Contains(in.Contenders, v.nodeName) {
				continue
			}
			if !probes(shard.IP{Addr: in.IP, Announcer: in.AnnouncingNode}) {
				continue
			}
			out = append(out, arpcheck.Target{
				IP:                 in.IP,
				ExpectedNode:       in.AnnouncingNode,
				Service:            in.Service.String(),
				ExpectedInterfaces: in.AnnouncingInterfaces,
				Explain: func(ctx context.Context) (string, string) {
					c := v.Explain(ctx, in)
					return c.Reason, c.Message
				},
			})
		}
		return out, nil
	}
}

// MACDirectory names ARP responders and announcers' MACs from the Node
// annotations agents publish, read on demand (an arpcheck.Directory).
func (v *View) MACDirectory() arpcheck.Directory { return v.macs }

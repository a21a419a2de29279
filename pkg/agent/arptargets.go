// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net"
	"slices"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
)

// ARPTargets is the ARP check's target source over the view: the
// LoadBalancer ingress IPs this node must probe (IPv4 with ARP, IPv6 with
// NDP), each with the announcing
// node (ServiceL2Status) and the MACs that node published. An IP this node
// announces itself is never judged by it. With k > 0 the IPs are sharded by
// rendezvous hashing over the peers (the nodes running ipvs-guard) so that each is probed by k nodes
// (the agent); with k <= 0 every IP is probed (a one-shot diagnose).
func (v *ClusterView) ARPTargets(k int) arpcheck.TargetSource {
	return func(context.Context) ([]arpcheck.Target, error) {
		ings, err := v.LoadBalancerIngresses()
		if err != nil {
			return nil, err
		}
		var assign *shard.Assigner
		if k > 0 {
			peers, err := v.Peers()
			if err != nil {
				return nil, err
			}
			assign = shard.NewAssigner(peers, k)
		}
		var out []arpcheck.Target
		for _, in := range ings {
			if !in.IP.IsValid() || in.AnnouncingNode == v.nodeName {
				continue
			}
			if assign != nil && !slices.Contains(assign.Probers(shard.IP{Addr: in.IP, Announcer: in.AnnouncingNode}), v.nodeName) {
				continue
			}
			out = append(out, arpcheck.Target{
				IP:           in.IP,
				ExpectedNode: in.AnnouncingNode,
				ExpectedMACs: v.NodeMACs(in.AnnouncingNode),
				Service:      in.Service.String(),
				Unannounced:  v.Unannounced(in),
			})
		}
		return out, nil
	}
}

// ResponderNode names the node that published mac (an arpcheck.NodeResolver).
func (v *ClusterView) ResponderNode(mac net.HardwareAddr) (string, bool) {
	n, _, ok := v.NodeForMAC(mac)
	return n, ok
}

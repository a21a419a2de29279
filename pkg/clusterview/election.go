// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"bytes"
	"crypto/sha256"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// This file ports MetalLB v0.16.2's layer-2 election
// (speaker/layer2_controller.go ShouldAnnounce, sortL2Candidates,
// preferredScoresFor; internal/config/config.go preferredNodeScores), so
// that the agent names the node MetalLB's rules prefer for an IP. The
// speakers' memberlist is read as the nodes with a Ready speaker Pod.

// adsForService returns the advertisements of a pool that apply to a
// Service with these labels: those whose serviceSelectors are empty or
// match them (MetalLB v0.16.2 l2AdsForService).
func adsForService(ads []l2Ad, svcLabels map[string]string) []l2Ad {
	var out []l2Ad
	for _, a := range ads {
		if a.selectsService(svcLabels) {
			out = append(out, a)
		}
	}
	return out
}

// preferredScores sums the preference weights of ads per node: each
// advertisement scores the nodes its nodeSelectors select by the weights
// of its preferredNodeSelectors that match them, and the scores of every
// advertisement that applies to the Service add up (MetalLB v0.16.2
// preferredNodeScores and preferredScoresFor). Nil when no node scores.
func preferredScores(ads []l2Ad, nodes map[string]nodeInfo) map[string]int64 {
	scores := map[string]int64{}
	for _, a := range ads {
		if len(a.preferred) == 0 {
			continue
		}
		for name, n := range nodes {
			if !a.selectsNode(n) {
				continue
			}
			var total int64
			for _, p := range a.preferred {
				if p.selector.Matches(labels.Set(n.labels)) {
					total += p.weight
				}
			}
			if total > 0 {
				scores[name] += total
			}
		}
	}
	if len(scores) == 0 {
		return nil
	}
	return scores
}

// sortCandidates orders candidates as every MetalLB v0.16.2 speaker does
// (sortL2Candidates): highest preference score first, then by
// sha256(node + "#" + ip), where ip is the Service's first ingress IP as
// Go's net.IP prints it. The first is the announcer.
func sortCandidates(candidates []string, ip netip.Addr, scores map[string]int64) {
	key := ip.Unmap().String()
	slices.SortFunc(candidates, func(a, b string) int {
		if sa, sb := scores[a], scores[b]; sa != sb {
			if sa > sb {
				return -1
			}
			return 1
		}
		ha := sha256.Sum256([]byte(a + "#" + key))
		hb := sha256.Sum256([]byte(b + "#" + key))
		return bytes.Compare(ha[:], hb[:])
	})
}

// candidates returns the nodes MetalLB v0.16.2 lets announce a Service
// through ads (speakersForAds, nodesWithEndpoint): a Ready speaker, not
// NetworkUnavailable, not excluded from load balancers, selected by one of
// ads; with externalTrafficPolicy Local, only those among epNodes.
func candidates(st *metallbState, ads []l2Ad, local bool, epNodes []string) []string {
	var out []string
	for name, n := range st.nodes {
		if !st.speakers[name] || n.networkUnavailable || n.excluded {
			continue
		}
		if !slices.ContainsFunc(ads, func(a l2Ad) bool { return a.selectsNode(n) }) {
			continue
		}
		if local && !slices.Contains(epNodes, name) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

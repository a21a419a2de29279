// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// ParsePeersService parses the --peers-service flag, "namespace/name"; ""
// gives the zero name (no peers Service).
func ParsePeersService(s string) (types.NamespacedName, error) {
	if s == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("peers Service %q: want namespace/name", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// peerSet is where the view finds the nodes the ARP probes are sharded over:
// the ready endpoints of the agents' own headless Service (the chart's peers
// Service selects the agent pods). The EndpointSlice controller changes those
// slices only when an agent comes, goes or turns unready, so watching them
// costs each agent an event per such change, not one per kubelet status
// report of every Node; and an agent that died or turned unready stops
// holding a share of IPs nobody probes.
//
// Without a Service the peers are this node alone: the agent probes every
// LoadBalancer IP it does not announce itself (complete, not sharded).
type peerSet struct {
	self     string
	svc      types.NamespacedName // zero: this node alone
	informer cache.SharedIndexInformer
	lister   discoverylisters.EndpointSliceLister
	synced   cache.InformerSynced
	memo     shardMemo
}

// newPeerSet sets up (without starting) the informer of the peers
// Service's EndpointSlices: namespaced and label-selected, so it lists and
// watches only those few slices.
func newPeerSet(self string, client kube.Interface, svc types.NamespacedName) *peerSet {
	p := &peerSet{self: self, svc: svc}
	if svc.Name == "" {
		return p
	}
	p.informer = kube.NewInformer(client.EndpointSlices(svc.Namespace), &discoveryv1.EndpointSlice{},
		kube.InformerOptions{Transform: stripPeerSlice, Client: client,
			Tweak: func(o *metav1.ListOptions) {
				o.LabelSelector = labels.Set{discoveryv1.LabelServiceName: svc.Name}.String()
			}})
	p.lister = discoverylisters.NewEndpointSliceLister(p.informer.GetIndexer())
	p.synced = p.informer.HasSynced
	return p
}

// UsePeersService makes the view take its peers from the EndpointSlices of
// the headless Service svc in svc's namespace (see peerSet); the zero name
// keeps this node alone. Call it once, before the informers start
// (Agent.Run, Sync).
func (v *View) UsePeersService(svc types.NamespacedName) {
	v.peers = newPeerSet(v.nodeName, v.client, svc)
	if v.peers.informer != nil {
		v.informers.add(v.peers.informer)
	}
}

// stripPeerSlice keeps of a peers EndpointSlice what Peers reads: each
// endpoint's node and readiness.
func stripPeerSlice(obj any) (any, error) {
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		out := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: es.Name, Namespace: es.Namespace,
			ResourceVersion: es.ResourceVersion, Labels: es.Labels}, AddressType: es.AddressType}
		for _, e := range es.Endpoints {
			out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{NodeName: e.NodeName,
				Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready}})
		}
		return out, nil
	}
	return obj, nil
}

func (p *peerSet) hasSynced() bool { return p.synced == nil || p.synced() }

// OnPeersChange calls f on every change of the peers Service's
// EndpointSlices (never without a peers Service): a peer that comes, goes
// or turns unready moves shares of the IPs. Call it after UsePeersService.
func (v *View) OnPeersChange(f func()) { v.peers.onChange(f) }

// onChange calls f on every change of the peers' slices (nil: never).
func (p *peerSet) onChange(f func()) {
	if p.informer == nil {
		return
	}
	_, _ = p.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	})
}

// Peers returns the names of the nodes the ARP probes are sharded over,
// sorted: the nodes of the ready endpoints of the peers Service (an endpoint
// without a ready condition counts as ready, as kube-proxy reads it), and
// always this node. This node counts even before its own pod is ready or
// seen: it then probes its share while the others still cover it too (more
// probes, never fewer). Without a peers Service it is this node alone.
func (v *View) Peers() ([]string, error) {
	if v == nil {
		return nil, ErrNotSynced
	}
	p := v.peers
	if p.lister == nil {
		return []string{p.self}, nil
	}
	if !p.synced() {
		return nil, ErrNotSynced
	}
	// The informer holds only the peers Service's slices (namespaced and
	// label-selected): list all of it. A namespaced list would need a
	// namespace index the cache does not keep (client-go logs a warning on
	// every call without one, then scans anyway).
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: p.svc.Name})
	slicesOf, err := p.lister.List(sel)
	if err != nil {
		return nil, fmt.Errorf("listing the peers' EndpointSlices from cache: %w", err)
	}
	out := []string{p.self}
	for _, es := range slicesOf {
		for _, e := range es.Endpoints {
			if e.NodeName == nil || *e.NodeName == "" || (e.Conditions.Ready != nil && !*e.Conditions.Ready) {
				continue
			}
			out = append(out, *e.NodeName)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// shardMemo remembers, for one set of peers and k, which IPs this node
// probes, so a check run hashes only IPs it has not seen with these peers
// instead of every IP against every peer (5,000 IPs × 1,000 peers are five
// million hashes a run). Entries of IPs gone from a run are dropped.
type shardMemo struct {
	mu     sync.Mutex
	peers  []string
	k      int
	assign *shard.Assigner
	mine   map[shard.IP]bool
}

// filter returns whether self probes each IP, for one run over peers with
// k probers per IP; done ends the run and forgets the IPs it did not ask
// about. Runs are serialised.
func (m *shardMemo) filter(peers []string, k int, self string) (probes func(shard.IP) bool, done func()) {
	m.mu.Lock()
	if m.assign == nil || m.k != k || !slices.Equal(m.peers, peers) {
		m.peers, m.k, m.assign, m.mine = slices.Clone(peers), k, shard.NewAssigner(peers, k), nil
	}
	seen := make(map[shard.IP]bool, len(m.mine))
	probes = func(ip shard.IP) bool {
		mine, ok := m.mine[ip]
		if !ok {
			mine = slices.Contains(m.assign.Probers(ip), self)
		}
		seen[ip] = mine
		return mine
	}
	done = func() {
		m.mine = seen
		m.mu.Unlock()
	}
	return probes, done
}

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// MetalLB's resources the cause of an unanswered IP is read from, on demand.
var (
	// IPAddressPoolGVR is MetalLB's address pool resource.
	IPAddressPoolGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	// L2AdvertisementGVR is MetalLB's layer-2 advertisement resource.
	L2AdvertisementGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
	// podsGVR reads the speakers' Pods through the dynamic client.
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
)

const (
	// DefaultMetalLBNamespace is where MetalLB's pools, advertisements and
	// speaker Pods are read (SetMetalLB changes it).
	DefaultMetalLBNamespace = "metallb-system"
	// DefaultSpeakerSelector selects MetalLB's speaker Pods (the labels of
	// MetalLB's own manifests and chart, which its memberlist discovery
	// lists by, METALLB_ML_LABELS).
	DefaultSpeakerSelector = "app=metallb,component=speaker"
	// MetalLBStateTTL is how long the agent reuses what it read of
	// MetalLB's state (pools, advertisements, speaker Pods, Nodes) to say
	// why an IP is not answered. Nothing is read while every IP this node
	// probes is answered; see docs/scale.md for the cost.
	MetalLBStateTTL = 2 * time.Minute
	// ExcludeFromLoadBalancersLabel is the label MetalLB (≥ 0.14, unless
	// its speakers run with --ignore-exclude-lb) honours: a node carrying
	// it, whatever its value, announces nothing.
	ExcludeFromLoadBalancersLabel = corev1.LabelNodeExcludeBalancers
)

// metallbState is one reading of what MetalLB's election depends on.
type metallbState struct {
	pools []pool
	ads   []l2Ad
	// nodes maps every node's name to what MetalLB's election reads of it.
	nodes map[string]nodeInfo
	// speakers maps a node to whether a speaker Pod on it is Ready.
	speakers map[string]bool
	read     time.Time
	err      error
}

// pool is an IPAddressPool: its name, labels and address ranges.
type pool struct {
	name   string
	labels map[string]string
	ranges []addrRange
}

type addrRange struct{ from, to netip.Addr }

func (r addrRange) contains(ip netip.Addr) bool {
	return ip.BitLen() == r.from.BitLen() && r.from.Compare(ip) <= 0 && ip.Compare(r.to) <= 0
}

// l2Ad is an L2Advertisement: which pools, Services and nodes it selects,
// and its weighted node preferences.
type l2Ad struct {
	name          string
	pools         []string
	poolSelectors []labels.Selector
	nodeSelectors []labels.Selector
	interfaces    []string
	// serviceSelectors (MetalLB ≥ 0.16.0) limit the Services it
	// announces (none: every Service of its pools); serviceSelectorText
	// says them in messages.
	serviceSelectors    []labels.Selector
	serviceSelectorText []string
	// preferred are its preferredNodeSelectors (MetalLB ≥ 0.16.2).
	preferred []preference
}

// preference is one of an L2Advertisement's preferredNodeSelectors: the
// weight (1-100) a node its selector matches gains in the election.
type preference struct {
	weight   int64
	selector labels.Selector
}

// selectsService reports whether the advertisement's serviceSelectors
// (none: every Service) match a Service's labels: MetalLB v0.16.2's
// l2AdsForService (speaker/layer2_controller.go).
func (a l2Ad) selectsService(svcLabels map[string]string) bool {
	if len(a.serviceSelectors) == 0 {
		return true
	}
	for _, s := range a.serviceSelectors {
		if s.Matches(labels.Set(svcLabels)) {
			return true
		}
	}
	return false
}

// selectsPool reports whether the advertisement applies to p: MetalLB
// applies an advertisement naming no pool (by name or selector) to every pool.
func (a l2Ad) selectsPool(p pool) bool {
	if len(a.pools) == 0 && len(a.poolSelectors) == 0 {
		return true
	}
	if slices.Contains(a.pools, p.name) {
		return true
	}
	for _, s := range a.poolSelectors {
		if s.Matches(labels.Set(p.labels)) {
			return true
		}
	}
	return false
}

// selectsNode reports whether the advertisement's nodeSelectors (none: every node) select n.
func (a l2Ad) selectsNode(n nodeInfo) bool {
	if len(a.nodeSelectors) == 0 {
		return true
	}
	for _, s := range a.nodeSelectors {
		if s.Matches(labels.Set(n.labels)) {
			return true
		}
	}
	return false
}

// nodeInfo is what MetalLB's speakers read of a Node to decide whether it
// may announce (speaker/layer2_controller.go speakersForAds, v0.16.2).
type nodeInfo struct {
	labels             map[string]string
	excluded           bool
	networkUnavailable bool
	// addresses are its InternalIP and ExternalIP addresses, with their
	// type (for LoadBalancer IP conflicts, conflicts.go).
	addresses []nodeAddress
}

// nodeAddress is one of a Node's InternalIP or ExternalIP addresses.
type nodeAddress struct {
	ip  netip.Addr
	typ corev1.NodeAddressType
}

// metallbOnDemand reads MetalLB's state when an IP is found unanswered and
// keeps it for ttl. Safe for concurrent use.
type metallbOnDemand struct {
	client    kube.Interface
	dyn       dynamic.Interface
	clock     clock.PassiveClock
	ttl       time.Duration
	namespace string
	speakers  string

	mu    sync.Mutex
	state *metallbState
}

func newMetalLBOnDemand(client kube.Interface, dyn dynamic.Interface) *metallbOnDemand {
	return &metallbOnDemand{client: client, dyn: dyn, clock: clock.RealClock{}, ttl: MetalLBStateTTL,
		namespace: DefaultMetalLBNamespace, speakers: DefaultSpeakerSelector}
}

// get returns MetalLB's state, read at most once per ttl: four LISTs
// (every Node, then pools and advertisements in MetalLB's namespace and its
// speaker Pods by label). A failed read is kept for the ttl too, so an agent
// without the permission or the CRDs does not retry on every run; the Nodes
// read before the failure are kept in it.
func (m *metallbOnDemand) get(ctx context.Context) *metallbState {
	return m.getSince(ctx, time.Time{})
}

// getSince is get, but reads again when what it keeps was read before
// since (a change seen after that read may not be in it).
func (m *metallbOnDemand) getSince(ctx context.Context, since time.Time) *metallbState {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	if m.state != nil && now.Sub(m.state.read) < m.ttl && !m.state.read.Before(since) {
		return m.state
	}
	st := &metallbState{read: now}
	st.err = m.read(ctx, st)
	m.state = st
	return st
}

func (m *metallbOnDemand) read(ctx context.Context, st *metallbState) error {
	// resourceVersion 0: served from the API server's watch cache.
	opts := metav1.ListOptions{ResourceVersion: "0"}
	// Nodes first: LoadBalancer IP conflicts with node addresses need them
	// even where MetalLB's CRDs are not installed.
	nodes, err := m.client.Nodes().List(ctx, opts)
	if err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	st.nodes = make(map[string]nodeInfo, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		_, excluded := n.Labels[ExcludeFromLoadBalancersLabel]
		info := nodeInfo{labels: n.Labels, excluded: excluded}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				info.addresses = append(info.addresses, nodeAddress{ip: ip.Unmap(), typ: a.Type})
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue {
				info.networkUnavailable = true
			}
		}
		st.nodes[n.Name] = info
	}
	if m.dyn == nil {
		return fmt.Errorf("no dynamic client to read MetalLB's configuration")
	}
	pools, err := m.dyn.Resource(IPAddressPoolGVR).Namespace(m.namespace).List(ctx, opts)
	if err != nil {
		return fmt.Errorf("listing MetalLB IPAddressPools in %s: %w", m.namespace, err)
	}
	for _, p := range pools.Items {
		st.pools = append(st.pools, parsePool(p))
	}
	ads, err := m.dyn.Resource(L2AdvertisementGVR).Namespace(m.namespace).List(ctx, opts)
	if err != nil {
		return fmt.Errorf("listing MetalLB L2Advertisements in %s: %w", m.namespace, err)
	}
	for _, a := range ads.Items {
		st.ads = append(st.ads, parseAd(a))
	}
	pods, err := m.dyn.Resource(podsGVR).Namespace(m.namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0", LabelSelector: m.speakers})
	if err != nil {
		return fmt.Errorf("listing MetalLB speaker Pods (%s) in %s: %w", m.speakers, m.namespace, err)
	}
	st.speakers = map[string]bool{}
	for _, u := range pods.Items {
		var p corev1.Pod
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil || p.Spec.NodeName == "" {
			continue
		}
		st.speakers[p.Spec.NodeName] = st.speakers[p.Spec.NodeName] || podReady(&p)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// parsePool reads an IPAddressPool's addresses: CIDRs or "from-to" ranges.
// An address it cannot parse is left out (MetalLB refuses such a pool).
func parsePool(u unstructured.Unstructured) pool {
	p := pool{name: u.GetName(), labels: u.GetLabels()}
	addrs, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "addresses")
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if from, to, ok := strings.Cut(a, "-"); ok {
			f, err1 := netip.ParseAddr(strings.TrimSpace(from))
			t, err2 := netip.ParseAddr(strings.TrimSpace(to))
			if err1 == nil && err2 == nil {
				p.ranges = append(p.ranges, addrRange{f.Unmap(), t.Unmap()})
			}
			continue
		}
		if pr, err := netip.ParsePrefix(a); err == nil {
			pr = pr.Masked()
			p.ranges = append(p.ranges, addrRange{pr.Addr().Unmap(), lastAddr(pr)})
		}
	}
	return p
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a.Unmap()
}

// parseAd reads an L2Advertisement's pool and node selection and interfaces.
// A selector it cannot parse selects nothing (MetalLB refuses it too).
func parseAd(u unstructured.Unstructured) l2Ad {
	a := l2Ad{name: u.GetName()}
	a.pools, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "ipAddressPools")
	a.interfaces, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "interfaces")
	a.poolSelectors = selectors(u.Object, "ipAddressPoolSelectors")
	a.nodeSelectors = selectors(u.Object, "nodeSelectors")
	a.serviceSelectors = selectors(u.Object, "serviceSelectors")
	for _, s := range a.serviceSelectors {
		a.serviceSelectorText = append(a.serviceSelectorText, selectorText(s))
	}
	prefs, _, _ := unstructured.NestedSlice(u.Object, "spec", "preferredNodeSelectors")
	for _, it := range prefs {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		var p struct {
			Weight     int32                `json:"weight"`
			Preference metav1.LabelSelector `json:"preference"`
		}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &p) != nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Preference)
		if err != nil {
			continue
		}
		a.preferred = append(a.preferred, preference{weight: int64(p.Weight), selector: sel})
	}
	return a
}

// selectorText says a selector as kubectl would ("<all>" for the empty one).
func selectorText(s labels.Selector) string {
	if s.Empty() {
		return "<all>"
	}
	return s.String()
}

func selectors(obj map[string]any, field string) []labels.Selector {
	list, _, _ := unstructured.NestedSlice(obj, "spec", field)
	var out []labels.Selector
	for _, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		var ls metav1.LabelSelector
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls) != nil {
			out = append(out, labels.Nothing())
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			s = labels.Nothing()
		}
		out = append(out, s)
	}
	return out
}

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// ServiceL2StatusGVR is MetalLB's layer-2 announcement status resource
// (MetalLB ≥ 0.14; one object per Service, status only).
var ServiceL2StatusGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}

// ErrNotSynced is returned by View while its informer caches have not
// completed their first list (for example while the API server is down at start).
var ErrNotSynced = errors.New("cluster state not synced yet")

// LoadBalancerIngress is one LoadBalancer ingress IP of a Service.
type LoadBalancerIngress struct {
	// IP is the ingress IP.
	IP netip.Addr
	// Service is the Service's namespace/name.
	Service types.NamespacedName
	// AnnouncingNode is the node MetalLB's ServiceL2Status says announces
	// the IP; empty when unknown (no CRD, no status yet) or settling (see
	// Contenders).
	AnnouncingNode string
	// AnnouncingInterfaces are the interfaces MetalLB announces on, when known.
	AnnouncingInterfaces []string
	// Contenders, when set, are the nodes (sorted, two or more) of the
	// several ServiceL2Statuses the Service has for a moment while MetalLB
	// moves the IP (the new speaker writes its status before the old one
	// deletes its own). Which of them answers is then settling: the IP is
	// judged without an expected announcer (no reply or several MACs are
	// still findings, a single MAC is not a wrong responder), by none of
	// these nodes, and it is not unannounced.
	Contenders []string
}

// View is a read-only view of the cluster state checks need, served
// from informer caches (no API request per call). It keeps answering from the
// last known state while the API server is down. Safe for concurrent use.
//
// Build it with New before the checkers (the ARP checker's targets
// read it) and hand it to the agent loop (agent.Config.View), whose Run
// starts its informers; a one-shot caller fills it with Sync.
type View struct {
	nodeName       string
	client         kube.Interface
	dyn            dynamic.Interface
	informers      informerSet
	svcInformer    cache.SharedIndexInformer
	nodeInformer   cache.SharedIndexInformer
	services       corelisters.ServiceLister
	ownNode        corelisters.NodeLister
	servicesSynced cache.InformerSynced
	nodesSynced    cache.InformerSynced
	// peers are the nodes ARP probes are sharded over (peers.go); macs
	// names ARP responders from Node annotations read on demand (nodemacs.go).
	peers *peerSet
	macs  *macDirectory
	// endpoints reads EndpointSlices on demand (endpoints.go): for the
	// ipvs check, and for the unannounced-IP message.
	endpoints, unannouncedEndpoints *endpointsOnDemand
	// metallb reads MetalLB's pools, advertisements, speaker Pods and the
	// Nodes on demand, to say why an IP is not answered (causes.go).
	metallb *metallbOnDemand
	// preference remembers which announcers were judged against MetalLB's
	// preferredNodeSelectors (preference.go), nodeAddrs which probed IPs
	// were compared with every Node's addresses (conflicts.go).
	preference preferenceMemo
	nodeAddrs  nodeAddressMemo

	// discoveryTimeout bounds the discovery read for MetalLB's CRD and
	// stopTimeout the wait for the informers to stop (DiscoveryTimeout,
	// InformerStopTimeout; SetTimeouts changes them).
	discoveryTimeout, stopTimeout time.Duration

	// l2StartMu serialises StartL2 (the ServiceL2Status informer starts once).
	l2StartMu sync.Mutex
	// mu guards l2 and l2Synced, set once the ServiceL2Status CRD is found.
	mu       sync.RWMutex
	l2       cache.GenericLister
	l2Synced cache.InformerSynced
}

// Bounds of the view's own waits on the API server.
const (
	// DiscoveryTimeout bounds the discovery read for MetalLB's CRD. It runs
	// on the agent's resync goroutine (and once before the loop starts): an
	// API server that accepts connections and never answers must not stop
	// the resync ticker, and with it every local check.
	DiscoveryTimeout = 5 * time.Second
	// InformerStopTimeout bounds how long stopping the view waits for its
	// informers to return. client-go's reflector sleeps out its watch-list
	// backoff (up to half a minute with jitter) without watching its stop
	// channel; it returns on its own afterwards, and a process that exits on
	// SIGTERM need not wait for it.
	InformerStopTimeout = 2 * time.Second
)

// nodesResource is the Nodes resource, read metadata-only (nodemacs.go).
var nodesResource = corev1.SchemeGroupVersion.WithResource("nodes")

// NotHeadlessServices selects the Services that have a cluster IP, as
// kube-proxy's Service informer does: a headless Service (a StatefulSet's, the
// agents' own peers Service) has no virtual server and no LoadBalancer IP.
const NotHeadlessServices = "spec.clusterIP!=" + corev1.ClusterIPNone

// New sets up (without starting) the informers the agent reads
// the cluster through; what each watches, and why (see docs/scale.md
// for the cost):
//
//   - Services but headless ones (NotHeadlessServices, kube-proxy's field
//     selector): the ipvs check compares every VIP kube-proxy must program;
//     LoadBalancer ingress IPs are the ARP targets. A headless Service has
//     neither.
//   - this Node only (field selector metadata.name): the conditions the
//     status manager compares before it writes.
//   - the EndpointSlices of the agents' own headless Service, when
//     UsePeersService names it: the peers the ARP probes are sharded over
//     (peers.go).
//   - MetalLB's ServiceL2Status through dyn, when the CRD exists.
//
// No other Node is watched: the MACs other agents publish in nodestatus.MACsAnnotation
// are read through meta (metadata only) when a probe needs them
// (nodemacs.go). No EndpointSlice is watched either: the few Services whose
// endpoints a verdict depends on are read when needed (endpoints.go).
// Caches keep only what is read (no managed fields, no other annotations)
// and no index.
func New(nodeName string, client kube.Interface, dyn dynamic.Interface, meta metadata.Interface) *View {
	svc := kube.NewInformer(client.Services(metav1.NamespaceAll), &corev1.Service{},
		kube.InformerOptions{Transform: stripService, Client: client,
			Tweak: func(o *metav1.ListOptions) { o.FieldSelector = NotHeadlessServices }})
	own := kube.NewInformer(client.Nodes(), &corev1.Node{},
		kube.InformerOptions{Transform: stripNode, Client: client,
			Tweak: func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
			}})
	v := &View{
		nodeName: nodeName, client: client, dyn: dyn,
		svcInformer: svc, nodeInformer: own,
		services: corelisters.NewServiceLister(svc.GetIndexer()), servicesSynced: svc.HasSynced,
		ownNode: corelisters.NewNodeLister(own.GetIndexer()), nodesSynced: own.HasSynced,
		endpoints: newEndpointsOnDemand(client, true), unannouncedEndpoints: newEndpointsOnDemand(client, false),
		metallb: newMetalLBOnDemand(client, dyn),
		peers:   newPeerSet(nodeName, client, types.NamespacedName{}),
		macs:    newMACDirectory(nil),

		discoveryTimeout: DiscoveryTimeout, stopTimeout: InformerStopTimeout,
	}
	if meta != nil {
		v.macs = newMACDirectory(meta.Resource(nodesResource))
	}
	v.informers.add(svc, own)
	return v
}

// Start starts every informer but ServiceL2Status's (StartL2 does) until
// stop is closed.
func (v *View) Start(stop <-chan struct{}) { v.informers.start(stop) }

// Shutdown waits for every informer to stop (call after stopping them), at
// most StopTimeout (see InformerStopTimeout); it reports whether they all did.
func (v *View) Shutdown() bool { return v.informers.wait(v.stopTimeout) }

// StopTimeout is how long Shutdown waits (InformerStopTimeout unless SetTimeouts changed it).
func (v *View) StopTimeout() time.Duration { return v.stopTimeout }

// SetTimeouts replaces DiscoveryTimeout and InformerStopTimeout for this
// view (tests shorten them). Call it before Start.
func (v *View) SetTimeouts(discovery, stop time.Duration) {
	v.discoveryTimeout, v.stopTimeout = discovery, stop
}

// SetMetalLB says where MetalLB runs: the namespace of its pools,
// advertisements and speaker Pods (DefaultMetalLBNamespace when empty), the
// label selector of its speaker Pods (DefaultSpeakerSelector when empty),
// and how long what is read of it is reused (MetalLBStateTTL when 0). Call
// it before Start.
func (v *View) SetMetalLB(namespace, speakers string, ttl time.Duration) {
	if namespace != "" {
		v.metallb.namespace = namespace
	}
	if speakers != "" {
		v.metallb.speakers = speakers
	}
	if ttl > 0 {
		v.metallb.ttl = ttl
	}
}

// AddInformer runs inf with the view's own informers: Start starts it and
// Shutdown waits for it. Call it before Start.
func (v *View) AddInformer(inf cache.SharedIndexInformer) { v.informers.add(inf) }

// AddServiceHandler adds h to the Services informer (every Service but
// headless ones, all types): the loop wakes the checks that read them.
func (v *View) AddServiceHandler(h cache.ResourceEventHandler) {
	_, _ = v.svcInformer.AddEventHandler(h)
}

// AddNodeHandler adds h to the informer of the agent's own Node.
func (v *View) AddNodeHandler(h cache.ResourceEventHandler) {
	_, _ = v.nodeInformer.AddEventHandler(h)
}

// informerSet runs informers once each and waits for them to stop.
type informerSet struct {
	mu      sync.Mutex
	all     []cache.SharedIndexInformer
	started int
	wg      sync.WaitGroup
}

func (s *informerSet) add(infs ...cache.SharedIndexInformer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, infs...)
}

// start runs the informers not yet running until stop is closed.
func (s *informerSet) start(stop <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inf := range s.all[s.started:] {
		s.wg.Go(func() { inf.Run(stop) })
	}
	s.started = len(s.all)
}

// wait waits until every started informer stopped, at most timeout; it
// reports whether they did.
func (s *informerSet) wait(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (v *View) setL2(l cache.GenericLister, synced cache.InformerSynced) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.l2, v.l2Synced = l, synced
}

// HasSynced reports whether every informer behind the view completed its first list.
func (v *View) HasSynced() bool {
	if v == nil || !v.servicesSynced() || !v.nodesSynced() || !v.peers.hasSynced() {
		return false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.l2Synced == nil || v.l2Synced()
}

// HasServiceL2Status reports whether MetalLB's ServiceL2Status CRD was found.
func (v *View) HasServiceL2Status() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.l2 != nil
}

// NodeName returns the agent's own node name.
func (v *View) NodeName() string { return v.nodeName }

// Node returns the agent's own Node from the cache.
func (v *View) Node() (*corev1.Node, error) {
	if v == nil {
		return nil, ErrNotSynced
	}
	n, err := v.ownNode.Get(v.nodeName)
	if err != nil {
		if apierrors.IsNotFound(err) && !v.nodesSynced() {
			return nil, ErrNotSynced
		}
		return nil, fmt.Errorf("reading node %s from cache: %w", v.nodeName, err)
	}
	return n, nil
}

// Services returns every Service in the cache (all types). Callers must not
// modify the returned objects.
func (v *View) Services() ([]*corev1.Service, error) {
	if v == nil || !v.servicesSynced() {
		return nil, ErrNotSynced
	}
	return v.services.List(labels.Everything())
}

// LoadBalancerIngresses returns every ingress IP of every LoadBalancer
// Service, sorted by IP, with the announcing node from ServiceL2Status when
// that CRD exists.
func (v *View) LoadBalancerIngresses() ([]LoadBalancerIngress, error) {
	svcs, err := v.Services()
	if err != nil {
		return nil, err
	}
	announcers := v.announcers()
	var out []LoadBalancerIngress
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		for _, ing := range s.Status.LoadBalancer.Ingress {
			ip, err := netip.ParseAddr(ing.IP)
			if err != nil {
				continue
			}
			a := announcers[key]
			out = append(out, LoadBalancerIngress{IP: ip, Service: key, AnnouncingNode: a.node, AnnouncingInterfaces: a.ifaces, Contenders: a.contenders})
		}
	}
	slices.SortFunc(out, func(a, b LoadBalancerIngress) int {
		if c := a.IP.Compare(b.IP); c != 0 {
			return c
		}
		return strings.Compare(a.Service.String(), b.Service.String())
	})
	return out, nil
}

// announcer is what the ServiceL2Statuses of one Service say: one node
// (and its interfaces), or, while several statuses name different nodes,
// those contenders and no node.
type announcer struct {
	node       string
	ifaces     []string
	contenders []string
}

// add merges one ServiceL2Status into what is known for its Service,
// whatever order the cache lists them in.
func (a announcer) add(node string, ifaces []string) announcer {
	switch {
	case a.node == "" && len(a.contenders) == 0:
		return announcer{node: node, ifaces: ifaces}
	case a.node == node:
		return announcer{node: node, ifaces: slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(a.ifaces), ifaces...))))}
	case a.node != "":
		return announcer{contenders: sortedSet(a.node, node)}
	default:
		return announcer{contenders: sortedSet(append(a.contenders, node)...)}
	}
}

func sortedSet(s ...string) []string { return slices.Compact(slices.Sorted(slices.Values(s))) }

func (v *View) announcers() map[types.NamespacedName]announcer {
	v.mu.RLock()
	l := v.l2
	v.mu.RUnlock()
	out := map[types.NamespacedName]announcer{}
	if l == nil {
		return out
	}
	objs, err := l.List(labels.Everything())
	if err != nil {
		return out
	}
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		node, _, _ := unstructured.NestedString(u.Object, "status", "node")
		name, _, _ := unstructured.NestedString(u.Object, "status", "serviceName")
		ns, _, _ := unstructured.NestedString(u.Object, "status", "serviceNamespace")
		if node == "" || name == "" {
			continue
		}
		var ifaces []string
		list, _, _ := unstructured.NestedSlice(u.Object, "status", "interfaces")
		for _, it := range list {
			if m, ok := it.(map[string]any); ok {
				if n, ok := m["name"].(string); ok && n != "" {
					ifaces = append(ifaces, n)
				}
			}
		}
		key := types.NamespacedName{Namespace: ns, Name: name}
		out[key] = out[key].add(node, ifaces)
	}
	return out
}

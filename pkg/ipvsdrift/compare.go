// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// Kinds of findings, stable: they are the kind of a JSON finding and the
// kind label of ipvs_guard_ipvs_drift_findings.
const (
	// KindGhostVirtualServer: a virtual server on a kube-ipvs0 address (or
	// on a node address at a port of the NodePort range) that no Service
	// asks for: kube-proxy's, left behind. Advisory.
	KindGhostVirtualServer = "ghost-virtual-server"
	// KindGhostAddress: an address on kube-ipvs0 that is no Service's VIP.
	// Advisory.
	KindGhostAddress = "ghost-address"
	// KindForeignVirtualServer: a virtual server kube-proxy would never
	// program (a firewall mark, a node address outside the NodePort range,
	// the VIP of a Service another proxy serves): an operator's or another
	// tool's, reported so nobody mistakes it for kube-proxy's. Advisory.
	KindForeignVirtualServer = "foreign-virtual-server"
	// KindStaleRealServer: a real server at weight > 0 that is no ready
	// endpoint of its Service: a share of new connections go to a backend
	// that is gone. A problem.
	KindStaleRealServer = "stale-real-server"
	// KindMissingRealServer: a ready endpoint with no real server: kube-proxy
	// did not program an endpoint change. A problem.
	KindMissingRealServer = "missing-real-server"
	// KindStuckWeightZero: a ready endpoint whose real server has stayed at
	// weight 0 past the graceful-termination window: it gets no new
	// connection. A problem.
	KindStuckWeightZero = "stuck-weight-zero"
	// KindWeightZeroLeftover: a real server at weight 0, no endpoint, past
	// the window with nothing left to drain (UDP/SCTP, or no connection):
	// kube-proxy forgot to delete it. Advisory.
	KindWeightZeroLeftover = "weight-zero-leftover"
	// KindGoneBackendConnections: IPVS connection entries of a Service's
	// virtual server whose real server is no endpoint of it any more.
	// Advisory.
	KindGoneBackendConnections = "connections-to-gone-backend"
)

// Kinds lists every kind, in report order.
var Kinds = []string{
	KindStaleRealServer, KindMissingRealServer, KindStuckWeightZero,
	KindGhostVirtualServer, KindGhostAddress, KindWeightZeroLeftover,
	KindGoneBackendConnections, KindForeignVirtualServer,
}

// IsProblem reports whether findings of kind make KubeProxyDataplaneDegraded
// True: those that break traffic now (docs/design.md §3b).
func IsProblem(kind string) bool {
	switch kind {
	case KindStaleRealServer, KindMissingRealServer, KindStuckWeightZero:
		return true
	}
	return false
}

// GracefulTerminationWindow is how long a real server may sit at weight 0
// before it is judged: kube-proxy 1.37's graceful termination
// (pkg/proxy/ipvs/graceful_termination.go) sets a removed endpoint's real
// server to weight 0 and tries to delete it every minute
// (rsCheckDeleteInterval), at once for UDP and SCTP and once a TCP one has
// no active or inactive connection; two such rounds and a sync.
const GracefulTerminationWindow = 2*time.Minute + 30*time.Second

// NodePortRange is the Service NodePort range of the API server
// (--service-node-port-range).
type NodePortRange struct{ Min, Max uint16 }

// DefaultNodePortRange is the API server's default range.
var DefaultNodePortRange = NodePortRange{Min: 30000, Max: 32767}

// Input is everything one comparison reads.
type Input struct {
	// Table is the IPVS table.
	Table ipvs.Table
	// LinkAddrs are kube-ipvs0's addresses.
	LinkAddrs []netip.Addr
	// Services are every Service.
	Services []*corev1.Service
	// Endpoints are the Services' endpoints; nil judges no real server.
	Endpoints ServiceEndpoints
	// Node is this node's name (Local traffic policies).
	Node string
	// NodePorts is the NodePort range; zero is DefaultNodePortRange.
	NodePorts NodePortRange
	// Conns are the connection table's counts; nil judges no connection.
	Conns ipvs.ConnCounts
	// ZeroFor says how long a real server has been at weight 0 (the
	// Checker's memory); nil means "for ever" (a one-shot diagnose).
	ZeroFor func(vs ipvs.Key, rs netip.AddrPort) time.Duration
	// Window is the graceful-termination window; zero is
	// GracefulTerminationWindow.
	Window time.Duration
}

// Finding is one divergence between the IPVS table and the cluster.
type Finding struct {
	// Kind is one of the Kind* constants.
	Kind string `json:"kind"`
	// Service is the Service ("namespace/name"), when there is one.
	Service string `json:"service,omitempty"`
	// VirtualServer is "10.96.0.10:53/UDP" ("" for a ghost address).
	VirtualServer string `json:"virtualServer,omitempty"`
	// Address is the kube-ipvs0 address of a ghost address.
	Address string `json:"address,omitempty"`
	// RealServer is "10.244.1.5:53", for real-server and connection kinds.
	RealServer string `json:"realServer,omitempty"`
	// Weight is the real server's weight (stale, weight-0 kinds).
	Weight int `json:"weight,omitempty"`
	// Connections is the number of connection entries (connections to a
	// gone backend) or of the real server's active and inactive ones.
	Connections int `json:"connections,omitempty"`
	// ZeroForSeconds is how long the real server has been seen at weight 0
	// (weight-0 kinds; 0 when unknown, as in a one-shot diagnose).
	ZeroForSeconds float64 `json:"zeroForSeconds,omitempty"`
	// Problem is true when the finding makes KubeProxyDataplaneDegraded True.
	Problem bool `json:"problem"`
}

// Key identifies the finding for the settle grace.
func (f Finding) Key() string {
	return f.Kind + " " + f.Service + " " + f.VirtualServer + " " + f.Address + " " + f.RealServer
}

// String renders the finding as one line.
func (f Finding) String() string {
	svc := ""
	if f.Service != "" {
		svc = " of " + f.Service
	}
	switch f.Kind {
	case KindGhostVirtualServer:
		return fmt.Sprintf("virtual server %s belongs to no Service (left behind by kube-proxy)", f.VirtualServer)
	case KindGhostAddress:
		return fmt.Sprintf("kube-ipvs0 address %s is no Service's VIP (left behind by kube-proxy)", f.Address)
	case KindForeignVirtualServer:
		return fmt.Sprintf("virtual server %s is not kube-proxy's (made by an operator or another tool)", f.VirtualServer)
	case KindStaleRealServer:
		return fmt.Sprintf("real server %s of %s%s (weight %d) is no ready endpoint", f.RealServer, f.VirtualServer, svc, f.Weight)
	case KindMissingRealServer:
		return fmt.Sprintf("ready endpoint %s%s has no real server in %s", f.RealServer, svc, f.VirtualServer)
	case KindStuckWeightZero:
		return fmt.Sprintf("ready endpoint %s%s stays at weight 0 in %s%s", f.RealServer, svc, f.VirtualServer, zeroFor(f.ZeroForSeconds))
	case KindWeightZeroLeftover:
		return fmt.Sprintf("real server %s of %s%s is at weight 0 with nothing to drain%s, and no endpoint", f.RealServer, f.VirtualServer, svc, zeroFor(f.ZeroForSeconds))
	case KindGoneBackendConnections:
		return fmt.Sprintf("%d connection entries of %s%s still go to %s, no endpoint any more", f.Connections, f.VirtualServer, svc, f.RealServer)
	}
	return f.Kind + " " + f.VirtualServer + f.Address
}

func zeroFor(s float64) string {
	if s <= 0 {
		return ""
	}
	return " for " + (time.Duration(s) * time.Second).String()
}

// State implements check.Finding: one finding publishes nothing of its own;
// the counts are in [Summary].
func (f Finding) State() check.State { return check.State{} }

// svcPort is one Service port a virtual server serves.
type svcPort struct {
	service string
	name    string
	proto   corev1.Protocol
	local   bool
}

type protoPort struct {
	proto ipvs.Protocol
	port  uint16
}

// Compare returns every divergence between in.Table and the cluster, sorted
// by kind (Kinds' order), Service, virtual server, real server.
func Compare(in Input) []Finding {
	out, _ := compare(in)
	return out
}

// compare is Compare that also returns the Services ("namespace/name")
// with a virtual server in the table whose endpoints in.Endpoints lacks
// (created since the full read), sorted, when in.Endpoints is set.
func compare(in Input) ([]Finding, []string) {
	window := cmp.Or(in.Window, GracefulTerminationWindow)
	npr := in.NodePorts
	if npr == (NodePortRange{}) {
		npr = DefaultNodePortRange
	}
	byKey := make(map[ipvs.Key]svcPort, len(in.Table))
	nodePorts := map[protoPort]svcPort{}
	vips := make(map[netip.Addr]bool, len(in.LinkAddrs))
	foreignVIPs := map[netip.Addr]bool{}
	for _, s := range in.Services {
		addVirtualServers(s, byKey, nodePorts, vips, foreignVIPs)
	}
	onLink := make(map[netip.Addr]bool, len(in.LinkAddrs))
	unread := map[string]bool{}
	var out []Finding
	for _, a := range in.LinkAddrs {
		onLink[a.Unmap()] = true
		if !vips[a.Unmap()] && !foreignVIPs[a.Unmap()] {
			out = append(out, Finding{Kind: KindGhostAddress, Address: a.Unmap().String()})
		}
	}
	var owned map[ipvs.Key]svcPort
	if in.Conns != nil {
		owned = make(map[ipvs.Key]svcPort, len(in.Table))
	}
	for _, e := range in.Table {
		k := e.Virtual.Key()
		sp, ok := byKey[k]
		if !ok && k.FWMark == 0 && !onLink[k.Address] {
			sp, ok = nodePorts[protoPort{k.Protocol, k.Port}]
		}
		switch {
		case ok:
			if owned != nil {
				owned[k] = sp
			}
			if _, read := in.Endpoints[sp.service]; !read && in.Endpoints != nil {
				unread[sp.service] = true
			}
			out = append(out, compareRealServers(in, e, sp, window)...)
		case k.FWMark != 0 || foreignVIPs[k.Address]:
			out = append(out, Finding{Kind: KindForeignVirtualServer, VirtualServer: k.String()})
		case onLink[k.Address] || (k.Port >= npr.Min && k.Port <= npr.Max):
			out = append(out, Finding{Kind: KindGhostVirtualServer, VirtualServer: k.String()})
		default:
			out = append(out, Finding{Kind: KindForeignVirtualServer, VirtualServer: k.String()})
		}
	}
	if in.Conns != nil && in.Endpoints != nil {
		out = append(out, goneBackends(in, owned)...)
	}
	sortFindings(out)
	return out, slices.Sorted(maps.Keys(unread))
}

// addVirtualServers records the virtual servers kube-proxy programs for s.
func addVirtualServers(s *corev1.Service, byKey map[ipvs.Key]svcPort, nodePorts map[protoPort]svcPort, vips, foreignVIPs map[netip.Addr]bool) {
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	_, otherProxy := s.Labels["service.kubernetes.io/service-proxy-name"]
	clusterIPs := s.Spec.ClusterIPs
	if len(clusterIPs) == 0 && s.Spec.ClusterIP != "" {
		clusterIPs = []string{s.Spec.ClusterIP}
	}
	if len(clusterIPs) == 0 || clusterIPs[0] == corev1.ClusterIPNone {
		return
	}
	name := s.Namespace + "/" + s.Name
	internalLocal := s.Spec.InternalTrafficPolicy != nil && *s.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	externalLocal := s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	type vip struct {
		addr  netip.Addr
		local bool
	}
	var list []vip
	add := func(str string, local bool) {
		if a, err := netip.ParseAddr(str); err == nil {
			list = append(list, vip{a.Unmap(), local})
		}
	}
	for _, c := range clusterIPs {
		add(c, internalLocal)
	}
	for _, e := range s.Spec.ExternalIPs {
		add(e, externalLocal)
	}
	if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy {
				continue
			}
			add(ing.IP, externalLocal)
		}
	}
	for _, v := range list {
		if otherProxy {
			foreignVIPs[v.addr] = true
		} else {
			vips[v.addr] = true
		}
	}
	if otherProxy {
		return
	}
	for _, p := range s.Spec.Ports {
		proto, err := ipvs.ParseProtocol(string(p.Protocol))
		if err != nil {
			continue
		}
		for _, v := range list {
			k := ipvs.Key{Address: v.addr, Protocol: proto, Port: uint16(p.Port)}
			if _, dup := byKey[k]; !dup {
				byKey[k] = svcPort{service: name, name: p.Name, proto: p.Protocol, local: v.local}
			}
		}
		if p.NodePort > 0 && s.Spec.Type != corev1.ServiceTypeClusterIP {
			pp := protoPort{proto, uint16(p.NodePort)}
			if _, dup := nodePorts[pp]; !dup {
				nodePorts[pp] = svcPort{service: name, name: p.Name, proto: p.Protocol, local: externalLocal}
			}
		}
	}
}

// compareRealServers judges the real servers of one Service's virtual
// server, when the Service's endpoints were read.
func compareRealServers(in Input, e ipvs.Entry, sp svcPort, window time.Duration) []Finding {
	slices_, read := in.Endpoints[sp.service]
	if !read {
		return nil
	}
	k := e.Virtual.Key()
	b := backendsOf(slices_, sp.name, sp.proto, k.Address.Is4(), sp.local, in.Node)
	vs := k.String
	var out []Finding
	for _, r := range e.Real {
		ap := netip.AddrPortFrom(r.Address.Unmap(), r.Port)
		if r.Weight > 0 {
			if !b.wants(ap) {
				out = append(out, Finding{Kind: KindStaleRealServer, Service: sp.service, VirtualServer: vs(), RealServer: ap.String(), Weight: r.Weight, Problem: true})
			}
			continue
		}
		age := time.Duration(1<<63 - 1)
		if in.ZeroFor != nil {
			age = in.ZeroFor(k, ap)
		}
		if age < window {
			continue
		}
		secs := 0.0
		if in.ZeroFor != nil {
			secs = age.Round(time.Second).Seconds()
		}
		conns := r.ActiveConn + r.InactiveConn
		switch {
		case b.wants(ap):
			out = append(out, Finding{Kind: KindStuckWeightZero, Service: sp.service, VirtualServer: vs(), RealServer: ap.String(), Connections: conns, ZeroForSeconds: secs, Problem: true})
		case k.Protocol != ipvs.TCP || conns == 0:
			out = append(out, Finding{Kind: KindWeightZeroLeftover, Service: sp.service, VirtualServer: vs(), RealServer: ap.String(), Connections: conns, ZeroForSeconds: secs})
		}
	}
	if !b.hinted {
		for _, ap := range b.want {
			if !hasReal(e.Real, ap) {
				out = append(out, Finding{Kind: KindMissingRealServer, Service: sp.service, VirtualServer: vs(), RealServer: ap.String(), Problem: true})
			}
		}
	}
	return out
}

func hasReal(real []ipvs.RealServer, ap netip.AddrPort) bool {
	for _, r := range real {
		if r.Port == ap.Port() && r.Address.Unmap() == ap.Addr() {
			return true
		}
	}
	return false
}

// goneBackends counts the connection entries of kube-proxy's virtual
// servers whose real server is no endpoint of the Service any more.
func goneBackends(in Input, owned map[ipvs.Key]svcPort) []Finding {
	type gone struct {
		sp  svcPort
		vs  ipvs.Key
		dst netip.AddrPort
	}
	counts := map[gone]int{}
	for ck, n := range in.Conns {
		sp, ok := owned[ck.Virtual]
		if !ok {
			continue
		}
		slices_, read := in.Endpoints[sp.service]
		if !read {
			continue
		}
		dst := netip.AddrPortFrom(ck.Real.Addr().Unmap(), ck.Real.Port())
		if !isEndpoint(slices_, sp.name, sp.proto, dst) {
			counts[gone{sp, ck.Virtual, dst}] += n
		}
	}
	out := make([]Finding, 0, len(counts))
	for g, n := range counts {
		out = append(out, Finding{Kind: KindGoneBackendConnections, Service: g.sp.service, VirtualServer: g.vs.String(), RealServer: g.dst.String(), Connections: n})
	}
	return out
}

func sortFindings(fs []Finding) {
	order := map[string]int{}
	for i, k := range Kinds {
		order[k] = i
	}
	slices.SortFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(order[a.Kind], order[b.Kind]),
			cmp.Compare(a.Service, b.Service),
			cmp.Compare(a.VirtualServer, b.VirtualServer),
			cmp.Compare(a.Address, b.Address),
			cmp.Compare(a.RealServer, b.RealServer),
		)
	})
}

// GoneBackendFilter returns the connection entries worth counting for in:
// those of a virtual server of a Service whose endpoints were read, going
// to a real server that is no endpoint of it any more (what goneBackends
// reports). Counting only those keeps the connection table's counts as
// small as the gone backends, whatever the number of entries. Each
// Service port's endpoints are indexed on first use.
func GoneBackendFilter(in Input) func(ipvs.ConnKey) bool {
	byKey := make(map[ipvs.Key]svcPort, len(in.Table))
	nodePorts := map[protoPort]svcPort{}
	vips, foreignVIPs := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, s := range in.Services {
		addVirtualServers(s, byKey, nodePorts, vips, foreignVIPs)
	}
	onLink := make(map[netip.Addr]bool, len(in.LinkAddrs))
	for _, a := range in.LinkAddrs {
		onLink[a.Unmap()] = true
	}
	owned := make(map[ipvs.Key]svcPort, len(in.Table))
	for _, e := range in.Table {
		k := e.Virtual.Key()
		sp, ok := byKey[k]
		if !ok && k.FWMark == 0 && !onLink[k.Address] {
			sp, ok = nodePorts[protoPort{k.Protocol, k.Port}]
		}
		if ok {
			owned[k] = sp
		}
	}
	endpoints := map[ipvs.Key]map[netip.AddrPort]bool{}
	return func(ck ipvs.ConnKey) bool {
		sp, ok := owned[ck.Virtual]
		if !ok {
			return false
		}
		sl, read := in.Endpoints[sp.service]
		if !read {
			return false
		}
		set, ok := endpoints[ck.Virtual]
		if !ok {
			set = endpointSet(sl, sp.name, sp.proto)
			endpoints[ck.Virtual] = set
		}
		return !set[netip.AddrPortFrom(ck.Real.Addr().Unmap(), ck.Real.Port())]
	}
}

// SPDX-License-Identifier: Apache-2.0

package ipvscheck

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// Kinds of expected virtual servers.
const (
	KindClusterIP    = "ClusterIP"
	KindLoadBalancer = "LoadBalancer"
	KindExternalIP   = "ExternalIP"
)

// ServiceProxyNameLabel marks a Service another proxy than kube-proxy
// serves: kube-proxy ignores it and its EndpointSlices.
const ServiceProxyNameLabel = "service.kubernetes.io/service-proxy-name"

// Expected is a virtual server kube-proxy should have programmed.
type Expected struct {
	// Service is "namespace/name".
	Service string
	// Kind says why the VIP exists (ClusterIP, LoadBalancer, ExternalIP).
	Kind string
	// Key is the virtual server's address, protocol and port.
	Key ipvs.Key
	// ReadyEndpoints counts the endpoints kube-proxy on this node should
	// make real servers of (ready, serving the port, of the VIP's family,
	// and on this node when the traffic policy is Local).
	ReadyEndpoints int
}

// ExpectedVirtualServers derives, from the cluster's Services and
// EndpointSlices, the virtual servers kube-proxy in IPVS mode should have
// programmed on the node named node; it modifies neither.
func ExpectedVirtualServers(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, node string) []Expected {
	byService := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		k := s.Namespace + "/" + name
		byService[k] = append(byService[k], s)
	}
	var out []Expected
	for _, svc := range svcs {
		if _, ignored := svc.Labels[ServiceProxyNameLabel]; ignored {
			continue
		}
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		clusterIPs := svc.Spec.ClusterIPs
		if len(clusterIPs) == 0 && svc.Spec.ClusterIP != "" {
			clusterIPs = []string{svc.Spec.ClusterIP}
		}
		if len(clusterIPs) == 0 || clusterIPs[0] == corev1.ClusterIPNone {
			continue // headless: kube-proxy programs nothing
		}
		name := svc.Namespace + "/" + svc.Name
		internalLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
		externalLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
		type vip struct {
			addr  netip.Addr
			kind  string
			local bool
		}
		var vips []vip
		for _, s := range clusterIPs {
			if a, err := netip.ParseAddr(s); err == nil {
				vips = append(vips, vip{a.Unmap(), KindClusterIP, internalLocal})
			}
		}
		for _, s := range svc.Spec.ExternalIPs {
			if a, err := netip.ParseAddr(s); err == nil {
				vips = append(vips, vip{a.Unmap(), KindExternalIP, externalLocal})
			}
		}
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				if ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy {
					continue // kube-proxy leaves it to the load balancer
				}
				if a, err := netip.ParseAddr(ing.IP); err == nil {
					vips = append(vips, vip{a.Unmap(), KindLoadBalancer, externalLocal})
				}
			}
		}
		for _, p := range svc.Spec.Ports {
			proto, err := ipvs.ParseProtocol(string(p.Protocol))
			if err != nil {
				continue
			}
			for _, v := range vips {
				out = append(out, Expected{
					Service:        name,
					Kind:           v.kind,
					Key:            ipvs.Key{Address: v.addr, Protocol: proto, Port: uint16(p.Port)},
					ReadyEndpoints: readyEndpoints(byService[name], p, v.addr.Is4(), v.local, node),
				})
			}
		}
	}
	return out
}

// readyEndpoints counts the distinct ready endpoints serving port p, of the
// given family, on node when local.
func readyEndpoints(slices_ []*discoveryv1.EndpointSlice, p corev1.ServicePort, v4 bool, local bool, node string) int {
	want := discoveryv1.AddressTypeIPv6
	if v4 {
		want = discoveryv1.AddressTypeIPv4
	}
	seen := map[string]bool{}
	for _, s := range slices_ {
		if s.AddressType != want || !slicePortMatches(s, p) {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if local && (ep.NodeName == nil || *ep.NodeName != node) {
				continue
			}
			if len(ep.Addresses) > 0 {
				seen[ep.Addresses[0]] = true
			}
		}
	}
	return len(seen)
}

func slicePortMatches(s *discoveryv1.EndpointSlice, p corev1.ServicePort) bool {
	for _, sp := range s.Ports {
		name := ""
		if sp.Name != nil {
			name = *sp.Name
		}
		proto := corev1.ProtocolTCP
		if sp.Protocol != nil {
			proto = *sp.Protocol
		}
		if name == p.Name && proto == p.Protocol && sp.Port != nil {
			return true
		}
	}
	return false
}

// Problems a virtual server can have.
const (
	ProblemMissing           = "missing"
	ProblemNoRealServers     = "no-real-servers"
	ProblemSchedulerMismatch = "scheduler-mismatch"
)

// Finding is one virtual server that is not as kube-proxy should have
// programmed it.
type Finding struct {
	// Service is the Service ("namespace/name"), when known.
	Service string `json:"service,omitempty"`
	// Kind says why the VIP exists (ClusterIP, LoadBalancer, ExternalIP).
	Kind string `json:"kind,omitempty"`
	// VIP is the virtual IP.
	VIP string `json:"vip"`
	// Port is the virtual port.
	Port uint16 `json:"port"`
	// Protocol is TCP, UDP or SCTP.
	Protocol string `json:"protocol"`
	// Problem is missing, no-real-servers or scheduler-mismatch.
	Problem string `json:"problem"`
	// Scheduler is the virtual server's scheduler (scheduler-mismatch).
	Scheduler string `json:"scheduler,omitempty"`
	// ExpectedScheduler is the configured scheduler (scheduler-mismatch).
	ExpectedScheduler string `json:"expectedScheduler,omitempty"`
	// ReadyEndpoints is how many ready endpoints the Service has for this VIP.
	ReadyEndpoints int `json:"readyEndpoints,omitempty"`
}

// String renders the finding as one line.
func (f Finding) String() string {
	vs := fmt.Sprintf("%s/%s", netip.AddrPortFrom(netip.MustParseAddr(f.VIP), f.Port), f.Protocol)
	svc := ""
	if f.Service != "" {
		svc = fmt.Sprintf(" (%s %s)", f.Kind, f.Service)
	}
	switch f.Problem {
	case ProblemMissing:
		return fmt.Sprintf("%s%s: no virtual server", vs, svc)
	case ProblemNoRealServers:
		return fmt.Sprintf("%s%s: no real servers though the Service has %d ready endpoint(s)", vs, svc, f.ReadyEndpoints)
	case ProblemSchedulerMismatch:
		return fmt.Sprintf("%s%s: scheduler %s, configured %s", vs, svc, f.Scheduler, f.ExpectedScheduler)
	}
	return vs + svc + ": " + f.Problem
}

// State implements check.Finding: one virtual server publishes nothing of its
// own; the table's counts are in [Summary].
func (f Finding) State() check.State { return check.State{} }

func newFinding(key ipvs.Key, problem string) Finding {
	return Finding{VIP: key.Address.String(), Port: key.Port, Protocol: key.Protocol.String(), Problem: problem}
}

// Compare returns the expected virtual servers that are missing, or have no
// real servers while their Service has ready endpoints, and every expected
// virtual server whose scheduler is not scheduler (empty skips that test).
// Findings come sorted by problem, then VIP, port and protocol.
func Compare(expected []Expected, table ipvs.Table, scheduler string) []Finding {
	idx := table.Index()
	var out []Finding
	seen := map[ipvs.Key]bool{}
	for _, e := range expected {
		if seen[e.Key] {
			continue
		}
		seen[e.Key] = true
		got, ok := idx[e.Key]
		f := newFinding(e.Key, "")
		f.Service, f.Kind, f.ReadyEndpoints = e.Service, e.Kind, e.ReadyEndpoints
		switch {
		case !ok:
			f.Problem = ProblemMissing
			f.ReadyEndpoints = 0
			out = append(out, f)
			continue
		case len(got.Real) == 0 && e.ReadyEndpoints > 0:
			f.Problem = ProblemNoRealServers
			out = append(out, f)
		}
		if scheduler != "" && got.Virtual.Scheduler != scheduler {
			f.Problem = ProblemSchedulerMismatch
			f.Scheduler, f.ExpectedScheduler, f.ReadyEndpoints = got.Virtual.Scheduler, scheduler, 0
			out = append(out, f)
		}
	}
	sortFindings(out)
	return out
}

// CompareSchedulers returns the virtual servers owned by kube-proxy (owned
// reports it) whose scheduler is not scheduler. It serves when the cluster
// cannot be read: kube-proxy binds every VIP it owns except NodePorts to
// kube-ipvs0.
func CompareSchedulers(table ipvs.Table, owned func(ipvs.Key) bool, scheduler string) []Finding {
	var out []Finding
	for _, e := range table {
		k := e.Virtual.Key()
		if k.FWMark != 0 || !owned(k) || e.Virtual.Scheduler == scheduler {
			continue
		}
		f := newFinding(k, ProblemSchedulerMismatch)
		f.Scheduler, f.ExpectedScheduler = e.Virtual.Scheduler, scheduler
		out = append(out, f)
	}
	sortFindings(out)
	return out
}

var problemOrder = map[string]int{ProblemMissing: 0, ProblemNoRealServers: 1, ProblemSchedulerMismatch: 2}

func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if c := problemOrder[a.Problem] - problemOrder[b.Problem]; c != 0 {
			return c
		}
		aa, _ := netip.ParseAddr(a.VIP)
		ba, _ := netip.ParseAddr(b.VIP)
		if c := aa.Compare(ba); c != 0 {
			return c
		}
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		return strings.Compare(a.Protocol, b.Protocol)
	})
}

// Summary is the size of the IPVS table, reported with every ipvs result; it
// publishes the table's counts as metrics ([Summary.State]).
type Summary struct {
	// VirtualServers is the number of virtual servers.
	VirtualServers int `json:"virtual_servers"`
	// RealServers is the number of real servers.
	RealServers int `json:"real_servers"`
	// VirtualServersWithoutRealServers counts the virtual servers whose
	// Service has ready endpoints but which have no real servers (nil
	// without a kubeconfig: it cannot be known then).
	VirtualServersWithoutRealServers *int `json:"virtual_servers_without_real_servers,omitempty"`
	// Expected is the number of virtual servers the Services call for (nil
	// without a kubeconfig).
	Expected *int `json:"expected_virtual_servers,omitempty"`
	// Services is the number of Services compared (nil without a kubeconfig).
	Services *int `json:"services,omitempty"`
	// Scheduler is the configured scheduler the table was compared with.
	Scheduler string `json:"scheduler"`
	// SchedulerSource says where Scheduler came from.
	SchedulerSource string `json:"schedulerSource"`
}

// String renders the summary as one line.
func (s Summary) String() string {
	out := fmt.Sprintf("%d virtual servers, %d real servers, configured scheduler %s (from %s)", s.VirtualServers, s.RealServers, s.Scheduler, s.SchedulerSource)
	if s.VirtualServersWithoutRealServers != nil {
		out += fmt.Sprintf(", %d without real servers though their Service has ready endpoints", *s.VirtualServersWithoutRealServers)
	}
	if s.Expected != nil && s.Services != nil {
		out += fmt.Sprintf("; %d expected from %d Services", *s.Expected, *s.Services)
	}
	return out
}

// State implements check.Finding: the table's ipvs_guard_ipvs_* state.
func (s Summary) State() check.State {
	return check.State{IPVSTable: &check.IPVSTableState{VirtualServers: s.VirtualServers, WithoutRealServers: s.VirtualServersWithoutRealServers}}
}

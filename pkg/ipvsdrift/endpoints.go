// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Endpoint is one endpoint of a Service as kube-proxy reads it.
type Endpoint struct {
	// Addr is the endpoint's first address (the one kube-proxy programs).
	Addr netip.Addr
	// Node is the endpoint's node name ("" when unset).
	Node string
	// Ready, Serving and Terminating are the endpoint's conditions, with
	// kube-proxy's defaults for unset ones (ready and serving when unset).
	Ready, Serving, Terminating bool
	// Hinted is true when the endpoint carries topology hints (zones or
	// nodes): kube-proxy may then program only some ready endpoints, so
	// none of the Service's is reported missing.
	Hinted bool
}

// Port is one port of an EndpointSlice.
type Port struct {
	// Name is the Service port's name.
	Name string
	// Protocol is the port's protocol.
	Protocol corev1.Protocol
	// Port is the endpoints' port number (the real server's port).
	Port uint16
}

// Slice is the part of an EndpointSlice the comparison reads: a few dozen
// bytes an endpoint, where the API object is about half a KiB.
type Slice struct {
	// Ports are the slice's ports.
	Ports []Port
	// Endpoints are the slice's endpoints.
	Endpoints []Endpoint
}

// ServiceEndpoints are the EndpointSlices of every Service read, by
// "namespace/name". A Service absent from the map was not read (its real
// servers are not judged); present with no slice, it has no endpoints.
type ServiceEndpoints map[string][]Slice

// Summarize keeps of each EndpointSlice what the comparison reads, by
// Service. Slices without the kubernetes.io/service-name label are not a
// Service's and are dropped.
func Summarize(eps []*discoveryv1.EndpointSlice) ServiceEndpoints {
	out := ServiceEndpoints{}
	for _, es := range eps {
		out.Add(es)
	}
	return out
}

// Add adds one EndpointSlice to its Service.
func (se ServiceEndpoints) Add(es *discoveryv1.EndpointSlice) {
	name := es.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
		return
	}
	var s Slice
	for _, p := range es.Ports {
		if p.Port == nil {
			continue
		}
		sp := Port{Protocol: corev1.ProtocolTCP, Port: uint16(*p.Port)}
		if p.Name != nil {
			sp.Name = *p.Name
		}
		if p.Protocol != nil {
			sp.Protocol = *p.Protocol
		}
		s.Ports = append(s.Ports, sp)
	}
	for _, ep := range es.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		a, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil {
			continue
		}
		e := Endpoint{Addr: a.Unmap(), Ready: true, Serving: true}
		if ep.NodeName != nil {
			e.Node = *ep.NodeName
		}
		if ep.Conditions.Ready != nil {
			e.Ready = *ep.Conditions.Ready
		}
		e.Serving = e.Ready
		if ep.Conditions.Serving != nil {
			e.Serving = *ep.Conditions.Serving
		}
		if ep.Hints != nil && (len(ep.Hints.ForZones) > 0 || len(ep.Hints.ForNodes) > 0) {
			e.Hinted = true
		}
		if ep.Conditions.Terminating != nil {
			e.Terminating = *ep.Conditions.Terminating
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	k := es.Namespace + "/" + name
	out := se[k]
	se[k] = append(out, s)
}

// Set marks a Service as read, with no slice yet: a Service whose read
// returned nothing has no endpoints.
func (se ServiceEndpoints) Set(service string) {
	if _, ok := se[service]; !ok {
		se[service] = []Slice{}
	}
}

// backends are the real servers kube-proxy programs for one Service port
// on this node, and every address:port that is still an endpoint at all.
// Slices, not maps: a Service port has a handful of endpoints, and the
// comparison builds these for every virtual server on every resync.
type backends struct {
	// want are the real servers kube-proxy should program (weight 1).
	want []netip.AddrPort
	// hinted: some endpoint has topology hints (missing is not judged).
	hinted bool
}

func (b backends) wants(ap netip.AddrPort) bool { return slices.Contains(b.want, ap) }

// backendsOf returns the real servers kube-proxy 1.37 programs for the
// Service port (name, proto) of family v4: the ready endpoints (only this
// node's when local); when there is none, the serving terminating ones
// (kube-proxy's ProxyTerminatingEndpoints, GA).
func backendsOf(sl []Slice, name string, proto corev1.Protocol, v4, local bool, node string) backends {
	var b backends
	var terminating []netip.AddrPort
	for _, s := range sl {
		for _, p := range s.Ports {
			if p.Name != name || p.Protocol != proto {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Addr.Is4() != v4 {
					continue
				}
				ap := netip.AddrPortFrom(e.Addr, p.Port)
				b.hinted = b.hinted || e.Hinted
				if local && e.Node != node {
					continue
				}
				switch {
				case e.Ready:
					if !b.wants(ap) {
						b.want = append(b.want, ap)
					}
				case e.Serving && e.Terminating:
					if !slices.Contains(terminating, ap) {
						terminating = append(terminating, ap)
					}
				}
			}
		}
	}
	if len(b.want) == 0 {
		b.want = terminating
	}
	return b
}

// isEndpoint reports whether ap is an endpoint of the Service port (name,
// proto), ready or not: a connection to one is not to a gone backend.
func isEndpoint(sl []Slice, name string, proto corev1.Protocol, ap netip.AddrPort) bool {
	for _, s := range sl {
		for _, p := range s.Ports {
			if p.Name != name || p.Protocol != proto || p.Port != ap.Port() {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Addr == ap.Addr() {
					return true
				}
			}
		}
	}
	return false
}

// endpointSet is every endpoint of the Service port (name, proto), ready
// or not, as isEndpoint sees them.
func endpointSet(sl []Slice, name string, proto corev1.Protocol) map[netip.AddrPort]bool {
	set := map[netip.AddrPort]bool{}
	for _, s := range sl {
		for _, p := range s.Ports {
			if p.Name != name || p.Protocol != proto {
				continue
			}
			for _, e := range s.Endpoints {
				set[netip.AddrPortFrom(e.Addr, p.Port)] = true
			}
		}
	}
	return set
}

// Programmed returns what kube-proxy 1.37 programs on node for the Service
// port (portName, proto) of service ("namespace/name") in family v4 (IPv6
// otherwise): the ready endpoints (only node's own when local), else the
// serving terminating ones; hinted is true when some endpoint has topology
// hints (then a missing endpoint is not judged). Every kernel reader (the
// IPVS table here, kube-proxy's nftables table in pkg/nftdrift) is compared
// with this one model.
func (se ServiceEndpoints) Programmed(service, portName string, proto corev1.Protocol, v4, local bool, node string) (want []netip.AddrPort, hinted bool) {
	b := backendsOf(se[service], portName, proto, v4, local, node)
	return b.want, b.hinted
}

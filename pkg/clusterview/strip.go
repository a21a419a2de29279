// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
)

// The transforms below replace each Service and EndpointSlice with a new
// object that holds only what the checks read. Every node caches every
// Service of the cluster, and keeps the EndpointSlices it reads on demand
// (endpoints.go), so their size is most of the agent's heap: with 5,000 of
// each, the fields dropped here (selectors, IP
// families, affinity, node ports, target ports, conditions, endpoint
// targets, hints, zones, UIDs, managed fields, annotations) and the strings
// shared here (namespaces, port names, node names, the enum values of every
// object) are megabytes on every node. Cached objects are read-only: the
// pointers to the shared values below must never be written through.

var (
	itpCluster = corev1.ServiceInternalTrafficPolicyCluster
	itpLocal   = corev1.ServiceInternalTrafficPolicyLocal
	ipModeVIP  = corev1.LoadBalancerIPModeVIP
	ipModeProx = corev1.LoadBalancerIPModeProxy
	protoTCP   = corev1.ProtocolTCP
	protoUDP   = corev1.ProtocolUDP
	protoSCTP  = corev1.ProtocolSCTP
	condTrue   = true
	condFalse  = false
)

// intern returns the one shared copy of s (namespaces, port and node names
// repeat across thousands of cached objects).
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// stripService keeps what the ipvs, arp-sysctls and arp checks read: name,
// namespace, the proxy-name label kube-proxy honours, type, cluster IPs,
// external IPs, ports (name, protocol, port), traffic policies and the
// LoadBalancer ingress IPs with their mode; for a LoadBalancer Service, its
// labels (L2Advertisement serviceSelectors), MetalLB's allow-shared-ip
// annotations and, with one and
// externalTrafficPolicy Local, the selector.
func stripService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	out := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: intern(s.Namespace), ResourceVersion: s.ResourceVersion,
			Labels: keepLabel(s.Labels, ipvscheck.ServiceProxyNameLabel)},
		Spec: corev1.ServiceSpec{Type: serviceType(s.Spec.Type), ClusterIP: s.Spec.ClusterIP, ExternalIPs: s.Spec.ExternalIPs,
			ExternalTrafficPolicy: trafficPolicy(s.Spec.ExternalTrafficPolicy)},
	}
	if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
		// MetalLB's L2Advertisement serviceSelectors match a LoadBalancer
		// Service's labels (causes.go, election.go): all of them are kept.
		if len(s.Labels) > 0 {
			out.Labels = s.Labels
		}
		// MetalLB's sharing rules (conflicts.go): its annotations, and the
		// selector it compares for externalTrafficPolicy Local.
		for _, k := range []string{AllowSharedIPAnnotation, DeprecatedAllowSharedIPAnnotation} {
			if val, ok := s.Annotations[k]; ok {
				if out.Annotations == nil {
					out.Annotations = map[string]string{}
				}
				out.Annotations[k] = val
			}
		}
		if out.Annotations != nil && s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			out.Spec.Selector = s.Spec.Selector
		}
	}
	out.Spec.ClusterIPs = s.Spec.ClusterIPs
	if len(s.Spec.ClusterIPs) == 1 && s.Spec.ClusterIPs[0] == s.Spec.ClusterIP {
		out.Spec.ClusterIPs = []string{out.Spec.ClusterIP} // one string, not two
	}
	if p := s.Spec.InternalTrafficPolicy; p != nil {
		switch *p {
		case itpCluster:
			out.Spec.InternalTrafficPolicy = &itpCluster
		case itpLocal:
			out.Spec.InternalTrafficPolicy = &itpLocal
		default:
			out.Spec.InternalTrafficPolicy = p
		}
	}
	if len(s.Spec.Ports) > 0 {
		out.Spec.Ports = make([]corev1.ServicePort, len(s.Spec.Ports))
		for i, p := range s.Spec.Ports {
			out.Spec.Ports[i] = corev1.ServicePort{Name: intern(p.Name), Protocol: protocol(p.Protocol), Port: p.Port}
		}
	}
	if ing := s.Status.LoadBalancer.Ingress; len(ing) > 0 {
		out.Status.LoadBalancer.Ingress = make([]corev1.LoadBalancerIngress, len(ing))
		for i, in := range ing {
			out.Status.LoadBalancer.Ingress[i] = corev1.LoadBalancerIngress{IP: in.IP, IPMode: ipMode(in.IPMode)}
		}
	}
	return out, nil
}

// stripEndpointSlice keeps what the ipvs check and Unannounced read: name,
// namespace, the Service name label, address type, ports (name, protocol,
// port) and, per endpoint, its first address (endpoints are counted by it),
// readiness and node.
func stripEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: intern(s.Namespace), ResourceVersion: s.ResourceVersion,
			Labels: internLabel(keepLabel(s.Labels, discoveryv1.LabelServiceName))},
		AddressType: addressType(s.AddressType),
	}
	if len(s.Ports) > 0 {
		out.Ports = make([]discoveryv1.EndpointPort, len(s.Ports))
		for i, p := range s.Ports {
			out.Ports[i] = discoveryv1.EndpointPort{Name: p.Name, Port: p.Port, Protocol: protocolPtr(p.Protocol)}
			if p.Name != nil {
				n := intern(*p.Name)
				out.Ports[i].Name = &n
			}
		}
	}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
		for i, e := range s.Endpoints {
			o := &out.Endpoints[i]
			if len(e.Addresses) > 0 {
				o.Addresses = e.Addresses[:1:1]
			}
			o.Conditions.Ready = boolPtr(e.Conditions.Ready)
			if e.NodeName != nil {
				n := intern(*e.NodeName)
				o.NodeName = &n
			}
		}
	}
	return out, nil
}

// keepLabel returns labels reduced to key (nil when absent).
func keepLabel(labels map[string]string, key string) map[string]string {
	v, ok := labels[key]
	if !ok {
		return nil
	}
	return map[string]string{key: v}
}

func internLabel(labels map[string]string) map[string]string {
	for k, v := range labels {
		labels[k] = intern(v)
	}
	return labels
}

func serviceType(t corev1.ServiceType) corev1.ServiceType {
	for _, c := range []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName} {
		if t == c {
			return c
		}
	}
	return t
}

func trafficPolicy(p corev1.ServiceExternalTrafficPolicy) corev1.ServiceExternalTrafficPolicy {
	for _, c := range []corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal} {
		if p == c {
			return c
		}
	}
	return p
}

func addressType(t discoveryv1.AddressType) discoveryv1.AddressType {
	for _, c := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN} {
		if t == c {
			return c
		}
	}
	return t
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if q := protocolPtr(&p); q != &p {
		return *q
	}
	return p
}

func protocolPtr(p *corev1.Protocol) *corev1.Protocol {
	if p == nil {
		return nil
	}
	switch *p {
	case protoTCP:
		return &protoTCP
	case protoUDP:
		return &protoUDP
	case protoSCTP:
		return &protoSCTP
	}
	return p
}

func ipMode(m *corev1.LoadBalancerIPMode) *corev1.LoadBalancerIPMode {
	if m == nil {
		return nil
	}
	switch *m {
	case ipModeVIP:
		return &ipModeVIP
	case ipModeProx:
		return &ipModeProx
	}
	return m
}

func boolPtr(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &condTrue
	default:
		return &condFalse
	}
}

// stripNode keeps metadata (annotations carry MACs), spec and conditions;
// images and volumes are the bulk of a Node and are never read.
func stripNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.ManagedFields = nil
		delete(n.Annotations, corev1.LastAppliedConfigAnnotation)
		n.Status.Images = nil
		n.Status.VolumesInUse = nil
		n.Status.VolumesAttached = nil
	}
	return obj, nil
}

// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
)

func svc(name, cip string, typ corev1.ServiceType, nodePort int32, lbIP string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{
		Type: typ, ClusterIP: cip, ClusterIPs: []string{cip},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: nodePort}}}}
	if lbIP != "" {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	}
	return s
}

func eps(svcName string, ips ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svcName + "-x",
		Labels: map[string]string{discoveryv1.LabelServiceName: svcName}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	for _, ip := range ips {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("n2"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}})
	}
	return es
}

// goodTable is kube-proxy 1.37.1's table for web (ClusterIP 10.96.0.10, two
// endpoints) and lb (LoadBalancer 192.0.2.10, NodePort 30080, one endpoint).
func goodTable() Table {
	t := Table{Family: "ip", Present: true, Chains: map[string]bool{ChainServices: true}, Maps: map[string]bool{},
		ServiceIPs: map[ServiceKey]string{
			{netip.MustParseAddr("10.96.0.10"), "tcp", 80}: "service-AAAAAAAA-default/web/tcp/http",
			{netip.MustParseAddr("10.96.0.11"), "tcp", 80}: "service-BBBBBBBB-default/lb/tcp/http",
			{netip.MustParseAddr("192.0.2.10"), "tcp", 80}: "external-BBBBBBBB-default/lb/tcp/http",
		},
		NodePorts:  map[PortKey]string{{"tcp", 30080}: "external-BBBBBBBB-default/lb/tcp/http"},
		NoEndpoint: map[ServiceKey]string{},
		DNAT: map[string][]netip.AddrPort{
			"service-AAAAAAAA-default/web/tcp/http": {netip.MustParseAddrPort("10.244.1.5:8080"), netip.MustParseAddrPort("10.244.1.6:8080")},
			"service-BBBBBBBB-default/lb/tcp/http":  {netip.MustParseAddrPort("10.244.1.7:8080")},
			"external-BBBBBBBB-default/lb/tcp/http": {},
		}}
	for _, c := range BaseChains {
		t.Chains[c] = true
	}
	for _, m := range VerdictMaps {
		t.Maps[m] = true
	}
	return t
}

func TestCompare(t *testing.T) {
	services := []*corev1.Service{svc("web", "10.96.0.10", corev1.ServiceTypeClusterIP, 0, ""), svc("lb", "10.96.0.11", corev1.ServiceTypeLoadBalancer, 30080, "192.0.2.10")}
	endpoints := ipvsdrift.Summarize([]*discoveryv1.EndpointSlice{eps("web", "10.244.1.5", "10.244.1.6"), eps("lb", "10.244.1.7")})
	tests := []struct {
		name  string
		edit  func(t *Table)
		kinds []string
	}{
		{name: "matches", edit: func(*Table) {}},
		{name: "table gone", edit: func(t *Table) { *t = Table{Family: "ip"} }, kinds: []string{KindTableMissing}},
		{name: "services chain and a map gone", edit: func(t *Table) { delete(t.Chains, ChainServices); delete(t.Maps, MapNodePorts) },
			kinds: []string{KindObjectMissing, KindObjectMissing}},
		{name: "ClusterIP element deleted", edit: func(t *Table) { delete(t.ServiceIPs, ServiceKey{netip.MustParseAddr("10.96.0.10"), "tcp", 80}) },
			kinds: []string{KindServiceIPMissing}},
		{name: "LB IP points at another Service's chain", edit: func(t *Table) {
			t.ServiceIPs[ServiceKey{netip.MustParseAddr("192.0.2.10"), "tcp", 80}] = "external-AAAAAAAA-default/web/tcp/http"
		}, kinds: []string{KindWrongChain}},
		{name: "a namespace that ends like another is not taken for it", edit: func(t *Table) {
			t.ServiceIPs[ServiceKey{netip.MustParseAddr("10.96.0.10"), "tcp", 80}] = "service-CCCCCCCC-x-default/web/tcp/http"
		}, kinds: []string{KindWrongChain}},
		{name: "NodePort deleted", edit: func(t *Table) { delete(t.NodePorts, PortKey{"tcp", 30080}) }, kinds: []string{KindNodePortMissing}},
		{name: "rejected with endpoints", edit: func(t *Table) {
			t.NoEndpoint[ServiceKey{netip.MustParseAddr("10.96.0.10"), "tcp", 80}] = "goto reject-chain"
		}, kinds: []string{KindRejected}},
		{name: "DNAT map rewritten", edit: func(t *Table) {
			t.DNAT["service-AAAAAAAA-default/web/tcp/http"] = []netip.AddrPort{netip.MustParseAddrPort("10.244.9.9:8080")}
		}, kinds: []string{KindMissingEndpoint, KindMissingEndpoint, KindStaleEndpoint}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := goodTable()
			tc.edit(&tbl)
			var got []string
			for _, f := range Compare(Input{Tables: []Table{tbl}, Services: services, Endpoints: endpoints, Node: "n1"}) {
				got = append(got, f.Kind)
				if f.String() == "" {
					t.Errorf("finding %+v renders empty", f)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.kinds)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("kinds %v, want %v", got, want)
			}
		})
	}
}

func TestDecoders(t *testing.T) {
	k, ok := decodeServiceKey([]byte{10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0}, false)
	if !ok || k.String() != "10.96.0.10 . tcp . 80" {
		t.Errorf("service key %v %t", k, ok)
	}
	if _, ok := decodeServiceKey([]byte{1, 2}, false); ok {
		t.Error("a short key decoded")
	}
	p, ok := decodePortKey([]byte{17, 0, 0, 0, 0x75, 0x30, 0, 0})
	if !ok || p != (PortKey{"udp", 30000}) {
		t.Errorf("port key %v %t", p, ok)
	}
	ap, ok := decodeAddrPort([]byte{10, 244, 1, 5, 0x1f, 0x90, 0, 0}, false)
	if !ok || ap.String() != "10.244.1.5:8080" {
		t.Errorf("addr port %v %t", ap, ok)
	}
	if got := chainPort("service-ABCDEFGH-ns/name/tcp/http"); got != "ns/name/tcp/http" {
		t.Errorf("chainPort = %q", got)
	}
	if got := chainPort("services"); got != "" {
		t.Errorf("chainPort(services) = %q", got)
	}
}

// FuzzDecoders: element keys and values come from the kernel, written by
// whatever program touched kube-proxy's table; no input may panic.
func FuzzDecoders(f *testing.F) {
	f.Add([]byte{10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0}, "service-ABCDEFGH-ns/name/tcp/http")
	f.Add([]byte{}, "local-")
	f.Fuzz(func(t *testing.T, b []byte, chain string) {
		for _, v6 := range []bool{false, true} {
			decodeServiceKey(b, v6)
			decodeAddrPort(b, v6)
		}
		decodePortKey(b)
		chainPort(chain)
	})
}

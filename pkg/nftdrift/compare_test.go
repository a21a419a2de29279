// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"net/netip"
	"slices"
	"strings"
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
		},
		Rules: map[string]int{
			"service-AAAAAAAA-default/web/tcp/http":   2,
			"service-BBBBBBBB-default/lb/tcp/http":    1,
			"external-BBBBBBBB-default/lb/tcp/http":   3,
			"endpoint-CCCCCCCC-default/x/tcp/http__1": 1, // not judged
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
		{name: "service-ips element of a deleted Service", edit: func(t *Table) {
			t.ServiceIPs[ServiceKey{netip.MustParseAddr("10.96.0.99"), "tcp", 80}] = "service-ZZZZZZZZ-default/gone/tcp/http"
		}, kinds: []string{KindGhostElement}},
		{name: "a known IP at a port no Service has", edit: func(t *Table) {
			t.ServiceIPs[ServiceKey{netip.MustParseAddr("10.96.0.10"), "tcp", 81}] = "service-AAAAAAAA-default/web/tcp/http"
		}, kinds: []string{KindGhostElement}},
		{name: "no-endpoint-services and service-nodeports elements of no Service", edit: func(t *Table) {
			t.NoEndpoint[ServiceKey{netip.MustParseAddr("10.96.0.98"), "udp", 53}] = "goto reject-chain"
			t.NodePorts[PortKey{"tcp", 31000}] = "external-ZZZZZZZZ-default/gone/tcp/http"
		}, kinds: []string{KindGhostElement, KindGhostElement}},
		{name: "a chain of a deleted Service that still has rules", edit: func(t *Table) {
			t.Rules["service-ZZZZZZZZ-default/gone/tcp/http"] = 1
			t.Rules["local-ZZZZZZZZ-default/gone/tcp/http"] = 2
		}, kinds: []string{KindGhostChain, KindGhostChain}},
		{name: "a flushed chain of a deleted Service waits for kube-proxy's next sync", edit: func(t *Table) {
			t.Rules["service-ZZZZZZZZ-default/gone/tcp/http"] = 0
			t.Rules["external-ZZZZZZZZ-default/gone/tcp/http"] = 0
		}},
		{name: "a truncated chain name is known by its hash", edit: func(t *Table) {
			t.Rules["service-"+chainHash("default/web/tcp/http")+"-default/w..."] = 1
			t.Rules["service-"+chainHash("default/gone/tcp/http")+"-default/g..."] = 1
		}, kinds: []string{KindGhostChain}},
		{name: "a stock chain is no ghost", edit: func(t *Table) { t.Rules["services"] = 4 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := goodTable()
			tc.edit(&tbl)
			var got []string
			for _, f := range Compare(Input{Tables: []Table{tbl}, Services: services, Endpoints: endpoints, Node: "n1"}) {
				got = append(got, f.Kind)
				if f.String() == "" || f.String() == f.Kind {
					t.Errorf("finding %+v renders no text", f)
				}
				if f.Problem != IsProblem(f.Kind) {
					t.Errorf("finding %+v: Problem %t, want %t", f, f.Problem, IsProblem(f.Kind))
				}
				if adv := f.State().Advisory; (adv != nil) == f.Problem {
					t.Errorf("finding %+v publishes advisory %+v", f, adv)
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

// TestChainHash: the hash of kube-proxy 1.37.1's chain names, as it names
// them (pkg/proxy/nftables/helpers_test.go: service-ULMVA6XW-ns1/svc1/tcp/p80).
func TestChainHash(t *testing.T) {
	if got := chainHash("ns1/svc1/tcp/p80"); got != "ULMVA6XW" {
		t.Errorf("chainHash = %q, want ULMVA6XW", got)
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

// TestBlackHole: a Local-policy LoadBalancer IP with endpoints on other
// nodes only is dropped by kube-proxy 1.37.1 on this node (its
// no-endpoint-services element says drop); a black hole where this node
// announces it, kube-proxy's rule elsewhere.
func TestBlackHole(t *testing.T) {
	lb := svc("lbl", "10.96.0.20", corev1.ServiceTypeLoadBalancer, 30090, "192.0.2.20")
	lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	remote := eps("lbl", "10.244.1.20") // on n2
	local := eps("lbl", "10.244.1.21")
	local.Endpoints[0].NodeName = ptr.To("n1")
	lbKey := ServiceKey{netip.MustParseAddr("192.0.2.20"), "tcp", 80}
	table := func(drop bool) Table {
		tbl := goodTable()
		tbl.ServiceIPs[ServiceKey{netip.MustParseAddr("10.96.0.20"), "tcp", 80}] = "service-DDDDDDDD-default/lbl/tcp/http"
		tbl.ServiceIPs[lbKey] = "external-DDDDDDDD-default/lbl/tcp/http"
		tbl.NodePorts[PortKey{"tcp", 30090}] = "external-DDDDDDDD-default/lbl/tcp/http"
		if drop {
			tbl.NoEndpoint[lbKey] = "drop"
		}
		return tbl
	}
	tests := []struct {
		name      string
		slice     *discoveryv1.EndpointSlice
		drop      bool
		announced map[netip.Addr]bool
		kinds     []string
	}{
		{name: "announced here, no local endpoint", slice: remote, drop: true, announced: map[netip.Addr]bool{netip.MustParseAddr("192.0.2.20"): true}, kinds: []string{KindBlackHole}},
		{name: "announced by another node", slice: remote, drop: true, announced: map[netip.Addr]bool{}},
		{name: "announcer unknown", slice: remote, drop: true},
		{name: "a local endpoint, yet dropped", slice: local, drop: true, announced: map[netip.Addr]bool{}, kinds: []string{KindRejected}},
		{name: "a local endpoint, served", slice: local, announced: map[netip.Addr]bool{netip.MustParseAddr("192.0.2.20"): true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			services := []*corev1.Service{svc("web", "10.96.0.10", corev1.ServiceTypeClusterIP, 0, ""), svc("lb", "10.96.0.11", corev1.ServiceTypeLoadBalancer, 30080, "192.0.2.10"), lb}
			endpoints := ipvsdrift.Summarize([]*discoveryv1.EndpointSlice{eps("web", "10.244.1.5", "10.244.1.6"), eps("lb", "10.244.1.7"), tc.slice})
			var got []string
			for _, f := range Compare(Input{Tables: []Table{table(tc.drop)}, Services: services, Endpoints: endpoints, Node: "n1", Announced: tc.announced}) {
				if f.Kind == KindStaleEndpoint || f.Kind == KindMissingEndpoint {
					continue // the table has no DNAT chains for lbl
				}
				got = append(got, f.Kind)
				if f.Kind == KindBlackHole && (!f.Problem || !strings.Contains(f.String(), "black hole")) {
					t.Errorf("black hole %+v: %s", f, f)
				}
			}
			if !slices.Equal(got, tc.kinds) {
				t.Errorf("kinds %v, want %v", got, tc.kinds)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

func svc(name, clusterIP string, mod ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports:      []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}},
		},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

type ep struct {
	addr, node string
	ready      bool
	terminated bool // serving and terminating
	hinted     bool
}

func slice(service string, port int32, proto corev1.Protocol, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: service + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Protocol: ptr.To(proto), Port: ptr.To(port)}},
	}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready)}}
		if e.node != "" {
			d.NodeName = ptr.To(e.node)
		}
		if e.terminated {
			d.Conditions.Serving, d.Conditions.Terminating = ptr.To(true), ptr.To(true)
		}
		if e.hinted {
			d.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "a"}}}
		}
		es.Endpoints = append(es.Endpoints, d)
	}
	return es
}

func vs(addr string, proto ipvs.Protocol, port uint16, real ...ipvs.RealServer) ipvs.Entry {
	return ipvs.Entry{Virtual: ipvs.VirtualServer{Address: netip.MustParseAddr(addr), Protocol: proto, Port: port, Scheduler: "rr"}, Real: real}
}

func rs(addrPort string, weight, conns int) ipvs.RealServer {
	ap := netip.MustParseAddrPort(addrPort)
	return ipvs.RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: weight, InactiveConn: conns}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestCompare(t *testing.T) {
	dns := svc("dns", "10.96.0.10")
	dnsEps := []*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP, ep{addr: "10.244.0.2", ready: true}, ep{addr: "10.244.0.3", ready: true})}
	healthy := vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.0.3:53", 1, 0))
	old := func(ipvs.Key, netip.AddrPort) time.Duration { return time.Hour }
	young := func(ipvs.Key, netip.AddrPort) time.Duration { return time.Second }
	tests := []struct {
		name string
		in   Input
		want []string // Finding.String() of each, in order
	}{
		{
			name: "healthy",
			in:   Input{Table: ipvs.Table{healthy}, LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns}, Endpoints: Summarize(dnsEps)},
		},
		{
			name: "Service deleted: ghost virtual server and ghost address",
			in:   Input{Table: ipvs.Table{healthy}, LinkAddrs: addrs("10.96.0.10"), Endpoints: ServiceEndpoints{}},
			want: []string{
				"virtual server 10.96.0.10:53/UDP belongs to no Service (left behind by kube-proxy)",
				"kube-ipvs0 address 10.96.0.10 is no Service's VIP (left behind by kube-proxy)",
			},
		},
		{
			name: "a port removed from a Service: ghost virtual server, address still used",
			in: Input{Table: ipvs.Table{healthy, vs("10.96.0.10", ipvs.TCP, 53)}, LinkAddrs: addrs("10.96.0.10"),
				Services: []*corev1.Service{dns}, Endpoints: Summarize(dnsEps)},
			want: []string{"virtual server 10.96.0.10:53/TCP belongs to no Service (left behind by kube-proxy)"},
		},
		{
			name: "operator's virtual servers are foreign, not ghosts",
			in: Input{Table: ipvs.Table{healthy, vs("192.168.1.10", ipvs.TCP, 80), {Virtual: ipvs.VirtualServer{FWMark: 7, Protocol: ipvs.TCP}}},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns}, Endpoints: Summarize(dnsEps)},
			want: []string{
				"virtual server 192.168.1.10:80/TCP is not kube-proxy's (made by an operator or another tool)",
				"virtual server fwmark 7 is not kube-proxy's (made by an operator or another tool)",
			},
		},
		{
			name: "NodePorts on node addresses are kube-proxy's; an unknown one in the range is a ghost",
			in: Input{
				Table: ipvs.Table{healthy,
					vs("192.168.1.10", ipvs.UDP, 30053, rs("10.244.0.2:53", 1, 0), rs("10.244.0.3:53", 1, 0)),
					vs("192.168.1.10", ipvs.UDP, 30054)},
				LinkAddrs: addrs("10.96.0.10"),
				Services: []*corev1.Service{svc("dns", "10.96.0.10", func(s *corev1.Service) {
					s.Spec.Type = corev1.ServiceTypeNodePort
					s.Spec.Ports[0].NodePort = 30053
				})},
				Endpoints: Summarize(dnsEps)},
			want: []string{"virtual server 192.168.1.10:30054/UDP belongs to no Service (left behind by kube-proxy)"},
		},
		{
			name: "the VIP of a Service another proxy serves is foreign",
			in: Input{Table: ipvs.Table{vs("10.96.0.20", ipvs.UDP, 53)}, LinkAddrs: addrs("10.96.0.20"),
				Services: []*corev1.Service{svc("other", "10.96.0.20", func(s *corev1.Service) {
					s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "kube-router"}
				})}, Endpoints: ServiceEndpoints{}},
			want: []string{"virtual server 10.96.0.20:53/UDP is not kube-proxy's (made by an operator or another tool)"},
		},
		{
			name: "stale and missing real servers (ipvsadm -a / -d by hand)",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.9.9:53", 1, 0))},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns}, Endpoints: Summarize(dnsEps)},
			want: []string{
				"real server 10.244.9.9:53 of 10.96.0.10:53/UDP of default/dns (weight 1) is no ready endpoint",
				"ready endpoint 10.244.0.3:53 of default/dns has no real server in 10.96.0.10:53/UDP",
			},
		},
		{
			name: "a Service not read is not judged",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.9.9:53", 1, 0))},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns}, Endpoints: ServiceEndpoints{}},
		},
		{
			name: "no ready endpoint: serving terminating ones are programmed",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0))},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns},
				Endpoints: Summarize([]*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP, ep{addr: "10.244.0.2", terminated: true})})},
		},
		{
			name: "Local traffic policy: only this node's endpoints",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0))},
				LinkAddrs: addrs("10.96.0.10"), Node: "n1",
				Services: []*corev1.Service{svc("dns", "10.96.0.10", func(s *corev1.Service) {
					s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				})},
				Endpoints: Summarize([]*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP, ep{addr: "10.244.0.2", node: "n1", ready: true}, ep{addr: "10.244.0.3", node: "n2", ready: true})})},
		},
		{
			name: "topology hints: missing is not judged, stale still is",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.9.9:53", 1, 0))},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns},
				Endpoints: Summarize([]*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP, ep{addr: "10.244.0.2", ready: true, hinted: true})})},
			want: []string{"real server 10.244.9.9:53 of 10.96.0.10:53/UDP of default/dns (weight 1) is no ready endpoint"},
		},
		{
			name: "weight 0 within the window: kube-proxy is draining it",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.0.3:53", 1, 0), rs("10.244.0.4:53", 0, 0))},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns}, Endpoints: Summarize(dnsEps), ZeroFor: young},
		},
		{
			name: "weight 0 past the window: a UDP leftover, a ready endpoint stuck at 0",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.0.3:53", 0, 0), rs("10.244.0.4:53", 0, 3))},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns}, Endpoints: Summarize(dnsEps), ZeroFor: old},
			want: []string{
				"ready endpoint 10.244.0.3:53 of default/dns stays at weight 0 in 10.96.0.10:53/UDP for 1h0m0s",
				"real server 10.244.0.4:53 of 10.96.0.10:53/UDP of default/dns is at weight 0 with nothing to drain for 1h0m0s, and no endpoint",
			},
		},
		{
			name: "TCP weight 0 with connections is still draining",
			in: Input{Table: ipvs.Table{vs("10.96.0.10", ipvs.TCP, 53, rs("10.244.0.4:53", 0, 3))},
				LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{svc("dns", "10.96.0.10", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolTCP })},
				Endpoints: Summarize([]*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolTCP)}), ZeroFor: old},
		},
		{
			name: "connections to a gone backend, per Service; a terminating endpoint's are not",
			in: Input{Table: ipvs.Table{healthy}, LinkAddrs: addrs("10.96.0.10"), Services: []*corev1.Service{dns},
				Endpoints: Summarize([]*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP,
					ep{addr: "10.244.0.2", ready: true}, ep{addr: "10.244.0.3", ready: true}, ep{addr: "10.244.0.5", terminated: true})}),
				Conns: ipvs.ConnCounts{
					{Virtual: healthy.Virtual.Key(), Real: netip.MustParseAddrPort("10.244.0.2:53")}: 5,
					{Virtual: healthy.Virtual.Key(), Real: netip.MustParseAddrPort("10.244.0.5:53")}: 2,
					{Virtual: healthy.Virtual.Key(), Real: netip.MustParseAddrPort("10.244.0.9:53")}: 4,
				}},
			want: []string{"4 connection entries of 10.96.0.10:53/UDP of default/dns still go to 10.244.0.9:53, no endpoint any more"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in.Conns != nil {
				// Counting only what GoneBackendFilter keeps finds the same.
				keep, kept := GoneBackendFilter(tt.in), ipvs.ConnCounts{}
				for k, n := range tt.in.Conns {
					if keep(k) {
						kept[k] = n
					}
				}
				all := Compare(tt.in)
				tt.in.Conns = kept
				if got := Compare(tt.in); fmt.Sprint(got) != fmt.Sprint(all) {
					t.Errorf("with the filter\n  %v\nwithout\n  %v", got, all)
				}
				if len(kept) != 1 {
					t.Errorf("kept %v, want the gone backend only", kept)
				}
			}
			got := Compare(tt.in)
			var lines []string
			for _, f := range got {
				lines = append(lines, f.String())
				if f.Problem != IsProblem(f.Kind) {
					t.Errorf("%s: Problem = %v, want %v", f, f.Problem, IsProblem(f.Kind))
				}
			}
			if strings.Join(lines, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(lines, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

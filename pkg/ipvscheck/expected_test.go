// SPDX-License-Identifier: Apache-2.0

package ipvscheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs/ipvstest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

const node = "vm-node-1"

func svc(ns, name string, typ corev1.ServiceType, clusterIP string, ports ...corev1.ServicePort) corev1.Service {
	return corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: typ, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Ports: ports},
	}
}

func port(name string, p int32, proto corev1.Protocol) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: p, Protocol: proto}
}

type ep struct {
	addr  string
	ready *bool
	node  string
}

func slice(ns, svcName string, family discoveryv1.AddressType, portName string, proto corev1.Protocol, eps ...ep) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svcName + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Protocol: ptr.To(proto), Port: ptr.To[int32](8080)}},
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.node != "" {
			x.NodeName = ptr.To(e.node)
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func key(a string, p uint16, proto ipvs.Protocol) ipvs.Key {
	return ipvs.Key{Address: netip.MustParseAddr(a), Port: p, Protocol: proto}
}

// fixtureCluster is the cluster of ../../shared/fixtures/kube-proxy-1.37.1:
// a ClusterIP Service 10.96.0.50:80 and a LoadBalancer Service 10.96.0.60:80
// (ingress 192.0.2.10), plus the kubernetes Service without endpoints.
func fixtureCluster() ([]corev1.Service, []discoveryv1.EndpointSlice) {
	lb := svc("default", "web-lb", corev1.ServiceTypeLoadBalancer, "10.96.0.60", port("", 80, corev1.ProtocolTCP))
	lb.Spec.Ports[0].NodePort = 30080
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	svcs := []corev1.Service{
		svc("default", "kubernetes", corev1.ServiceTypeClusterIP, "10.96.0.1", port("https", 443, corev1.ProtocolTCP)),
		svc("default", "web", corev1.ServiceTypeClusterIP, "10.96.0.50", port("", 80, corev1.ProtocolTCP)),
		lb,
	}
	eps := []discoveryv1.EndpointSlice{
		slice("default", "web", discoveryv1.AddressTypeIPv4, "", corev1.ProtocolTCP, ep{addr: "10.0.2.15", node: node}),
		slice("default", "web-lb", discoveryv1.AddressTypeIPv4, "", corev1.ProtocolTCP, ep{addr: "10.0.2.15", node: node}, ep{addr: "10.244.1.11", node: "vm-node-2"}),
	}
	return svcs, eps
}

func rs(a string) ipvs.RealServer {
	return ipvs.RealServer{Address: netip.MustParseAddr(a), Port: 8080, Weight: 1}
}

func entry(a string, p uint16, proto ipvs.Protocol, sched string, real ...ipvs.RealServer) ipvs.Entry {
	return ipvs.Entry{Virtual: ipvs.VirtualServer{Address: netip.MustParseAddr(a), Protocol: proto, Port: p, Scheduler: sched}, Real: real}
}

// fixtureTable is the table of ipvsadm-Ln-lc.txt.
func fixtureTable() ipvs.Table {
	return ipvs.Table{
		entry("192.0.2.10", 80, ipvs.TCP, "lc", rs("10.0.2.15"), rs("10.244.1.11")),
		entry("10.0.2.15", 30080, ipvs.TCP, "lc", rs("10.0.2.15"), rs("10.244.1.11")),
		entry("10.96.0.1", 443, ipvs.TCP, "lc"),
		entry("10.96.0.50", 80, ipvs.TCP, "lc", rs("10.0.2.15")),
		entry("10.96.0.60", 80, ipvs.TCP, "lc", rs("10.0.2.15"), rs("10.244.1.11")),
	}
}

func TestExpectedVirtualServers(t *testing.T) {
	svcs, eps := fixtureCluster()
	got := ExpectedVirtualServers(pointers(svcs), pointers(eps), node)
	want := []Expected{
		{Service: "default/kubernetes", Kind: KindClusterIP, Key: key("10.96.0.1", 443, ipvs.TCP)},
		{Service: "default/web", Kind: KindClusterIP, Key: key("10.96.0.50", 80, ipvs.TCP), ReadyEndpoints: 1},
		{Service: "default/web-lb", Kind: KindClusterIP, Key: key("10.96.0.60", 80, ipvs.TCP), ReadyEndpoints: 2},
		{Service: "default/web-lb", Kind: KindLoadBalancer, Key: key("192.0.2.10", 80, ipvs.TCP), ReadyEndpoints: 2},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestExpectedPolicies(t *testing.T) {
	dns := svc("kube-system", "dns", corev1.ServiceTypeClusterIP, "10.96.0.10", port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP))
	dns.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::a"}
	lb := svc("default", "local", corev1.ServiceTypeLoadBalancer, "10.96.0.70", port("", 443, corev1.ProtocolTCP))
	lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	lb.Spec.ExternalIPs = []string{"198.51.100.7"}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.20"}, {IP: "192.0.2.21", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}, {Hostname: "lb.example"}}
	headless := svc("default", "headless", corev1.ServiceTypeClusterIP, "None", port("", 80, corev1.ProtocolTCP))
	ignored := svc("default", "other-proxy", corev1.ServiceTypeClusterIP, "10.96.0.99", port("", 80, corev1.ProtocolTCP))
	ignored.Labels = map[string]string{ServiceProxyNameLabel: "foo"}
	extName := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "x.example"}}
	eps := []discoveryv1.EndpointSlice{
		slice("kube-system", "dns", discoveryv1.AddressTypeIPv4, "dns", corev1.ProtocolUDP, ep{addr: "10.244.0.2"}, ep{addr: "10.244.0.3", ready: ptr.To(false)}),
		slice("kube-system", "dns", discoveryv1.AddressTypeIPv6, "dns", corev1.ProtocolUDP, ep{addr: "fd00:244::2"}),
		slice("default", "local", discoveryv1.AddressTypeIPv4, "", corev1.ProtocolTCP, ep{addr: "10.244.1.5", node: "other"}, ep{addr: "10.244.0.5", node: node}),
	}
	got := ExpectedVirtualServers([]*corev1.Service{&dns, &lb, &headless, &ignored, &extName}, pointers(eps), node)
	byKey := map[string]Expected{}
	for _, e := range got {
		byKey[e.Key.String()] = e
	}
	want := map[string]int{
		"10.96.0.10:53/UDP":    1, // one ready of two
		"[fd00:96::a]:53/UDP":  1,
		"10.96.0.10:53/TCP":    0, // no slice serves dns-tcp
		"[fd00:96::a]:53/TCP":  0,
		"10.96.0.70:443/TCP":   2, // cluster policy for the ClusterIP
		"192.0.2.20:443/TCP":   1, // Local: only this node's endpoint
		"198.51.100.7:443/TCP": 1,
	}
	gotCounts := map[string]int{}
	for k, e := range byKey {
		gotCounts[k] = e.ReadyEndpoints
	}
	if diff := cmp.Diff(want, gotCounts); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestCompare(t *testing.T) {
	svcs, eps := fixtureCluster()
	exp := ExpectedVirtualServers(pointers(svcs), pointers(eps), node)
	tests := []struct {
		name  string
		table ipvs.Table
		sched string
		want  []string
	}{
		{name: "real capture is healthy", table: fixtureTable(), sched: "lc"},
		{name: "scheduler mismatch on every kube-proxy VIP", table: fixtureTable(), sched: "rr",
			want: []string{"10.96.0.1:443/TCP scheduler-mismatch", "10.96.0.50:80/TCP scheduler-mismatch", "10.96.0.60:80/TCP scheduler-mismatch", "192.0.2.10:80/TCP scheduler-mismatch"}},
		{name: "LB VIP missing and ClusterIP without real servers", sched: "lc",
			table: func() ipvs.Table {
				t := fixtureTable()
				t[3].Real = nil
				return append(t[1:2:2], t[2:]...)
			}(),
			want: []string{"192.0.2.10:80/TCP missing", "10.96.0.50:80/TCP no-real-servers"}},
		{name: "empty table: everything missing", table: ipvs.Table{}, sched: "lc",
			want: []string{"10.96.0.1:443/TCP missing", "10.96.0.50:80/TCP missing", "10.96.0.60:80/TCP missing", "192.0.2.10:80/TCP missing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range Compare(onlyFamilies(exp, tc.table), tc.table, tc.sched) {
				got = append(got, f.VIP+":"+itoa(f.Port)+"/"+f.Protocol+" "+f.Problem)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func TestCompareSchedulersWithoutCluster(t *testing.T) {
	onLink := map[netip.Addr]bool{netip.MustParseAddr("10.96.0.1"): true, netip.MustParseAddr("192.0.2.10"): true}
	got := CompareSchedulers(fixtureTable(), func(k ipvs.Key) bool { return onLink[k.Address] }, "rr")
	if len(got) != 2 || got[0].VIP != "10.96.0.1" || got[1].VIP != "192.0.2.10" || got[0].Scheduler != "lc" || got[0].ExpectedScheduler != "rr" {
		t.Errorf("got %+v", got)
	}
}

type fakeCluster struct {
	svcs []corev1.Service
	eps  []discoveryv1.EndpointSlice
	err  error
	// asked records the Services each EndpointSlices call named (calls
	// naming none are not recorded).
	asked *[][]string
}

func (f fakeCluster) Services(context.Context) ([]*corev1.Service, error) {
	return pointers(f.svcs), f.err
}

func (f fakeCluster) EndpointSlices(_ context.Context, services []string) ([]*discoveryv1.EndpointSlice, error) {
	if f.asked != nil && len(services) > 0 {
		*f.asked = append(*f.asked, services)
	}
	return pointers(f.eps), nil
}

func fixtureLink(name string) (kubeproxy.Link, error) {
	l := kubeproxy.Link{Name: name, Exists: true}
	for _, a := range []string{"10.96.0.1", "10.96.0.50", "10.96.0.60", "192.0.2.10"} {
		l.Addrs = append(l.Addrs, netip.MustParseAddr(a))
	}
	return l, nil
}

func TestChecker(t *testing.T) {
	svcs, eps := fixtureCluster()
	sched := func(s string) func(context.Context) (string, string) {
		return func(context.Context) (string, string) { return s, kubeproxy.FromConfigz }
	}
	tests := []struct {
		name       string
		table      ipvs.Table
		err        error
		cluster    Cluster
		sched      string
		wantStatus check.Status
		wantReason string
		wantInMsg  string
	}{
		{name: "healthy", table: fixtureTable(), cluster: fakeCluster{svcs: svcs, eps: eps}, sched: "lc", wantStatus: check.StatusOK, wantReason: ReasonOK},
		{name: "no kubeconfig, schedulers fine", table: fixtureTable(), sched: "lc", wantStatus: check.StatusSkipped, wantReason: ReasonNoKubeconfig, wantInMsg: "use the configured scheduler lc"},
		{name: "no kubeconfig, scheduler mismatch", table: fixtureTable(), sched: "rr", wantStatus: check.StatusProblem, wantReason: ReasonSchedulerMismatch, wantInMsg: "10.96.0.1:443/TCP: scheduler lc, configured rr"},
		{name: "module not loaded with kube-ipvs0 present", err: ipvs.ErrModuleNotLoaded, sched: "lc", wantStatus: check.StatusProblem, wantReason: ReasonModuleNotLoaded, wantInMsg: "ip_vs is not loaded (or the kernel has no IPVS netlink family), so there is no IPVS table"},
		{name: "API down: node-local comparison only", table: fixtureTable(), cluster: fakeCluster{err: errors.New("connection refused")}, sched: "lc",
			wantStatus: check.StatusSkipped, wantReason: ReasonServicesUnreadable, wantInMsg: "connection refused"},
		{name: "missing LB VIP", table: fixtureTable()[1:], cluster: fakeCluster{svcs: svcs, eps: eps}, sched: "lc", wantStatus: check.StatusProblem, wantReason: ReasonVirtualServerMissing,
			wantInMsg: "192.0.2.10:80/TCP (LoadBalancer default/web-lb): no virtual server"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ipvstest.NewFake(tc.table)
			f.InjectError(tc.err)
			c, err := NewChecker(Config{IPVS: f, ReadLink: fixtureLink, Cluster: tc.cluster, NodeName: node, Scheduler: sched(tc.sched), Distro: distro.Kubeadm})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.wantStatus || res.Reason != tc.wantReason {
				t.Fatalf("got %s/%s (%s), want %s/%s", res.Status, res.Reason, res.Message, tc.wantStatus, tc.wantReason)
			}
			if !strings.Contains(res.Message, tc.wantInMsg) {
				t.Errorf("message %q lacks %q", res.Message, tc.wantInMsg)
			}
		})
	}
}

func TestLoadBalancerIPsFromClientset(t *testing.T) {
	svcs, _ := fixtureCluster()
	cs := fake.NewClientset(&svcs[0], &svcs[1], &svcs[2])
	got, err := LoadBalancerIPs(NewCluster(kubetest.FromClientset(cs)))(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.10") {
		t.Errorf("got %v", got)
	}
}

// TestSummaryForMetrics: the metrics collector reads the table size from the
// ipvs result's findings by these JSON names.
func TestSummaryForMetrics(t *testing.T) {
	svcs, eps := fixtureCluster()
	tbl := fixtureTable()
	tbl[3].Real = nil // 10.96.0.50:80 has a ready endpoint but no real server
	c, err := NewChecker(Config{IPVS: ipvstest.NewFake(tbl), ReadLink: fixtureLink, Cluster: fakeCluster{svcs: svcs, eps: eps}, NodeName: node,
		Scheduler: func(context.Context) (string, string) { return "lc", kubeproxy.FromConfigz }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res.Findings[0])
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got["virtual_servers"] != 5.0 || got["virtual_servers_without_real_servers"] != 1.0 || got["real_servers"] != 6.0 {
		t.Errorf("summary JSON = %s", raw)
	}
	if res.Reason != ReasonNoRealServers {
		t.Errorf("reason = %s", res.Reason)
	}
}

// TestCompareDualStack covers the IPv6 side: a dual-stack LoadBalancer
// Service expects a virtual server on its IPv6 ClusterIP and IPv6 ingress IP
// as on the IPv4 ones, and a table that lacks the IPv6 ones while holding
// other IPv6 virtual servers reports them missing; a single-stack (IPv4
// only) kube-proxy is not blamed for them.
func TestCompareDualStack(t *testing.T) {
	lb := svc("default", "web-lb", corev1.ServiceTypeLoadBalancer, "10.96.0.60", port("", 80, corev1.ProtocolTCP))
	lb.Spec.ClusterIPs = []string{"10.96.0.60", "fd00:96::3c"}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {IP: "2001:db8::10"}}
	eps := []discoveryv1.EndpointSlice{
		slice("default", "web-lb", discoveryv1.AddressTypeIPv4, "", corev1.ProtocolTCP, ep{addr: "10.244.1.11", node: "vm-node-2"}),
		slice("default", "web-lb", discoveryv1.AddressTypeIPv6, "", corev1.ProtocolTCP, ep{addr: "fd00:244::b", node: "vm-node-2"}),
	}
	exp := ExpectedVirtualServers([]*corev1.Service{&lb}, pointers(eps), node)
	var keys []string
	for _, e := range exp {
		keys = append(keys, e.Kind+" "+e.Key.String()+" "+strconv.Itoa(e.ReadyEndpoints))
	}
	wantKeys := []string{
		"ClusterIP 10.96.0.60:80/TCP 1", "ClusterIP [fd00:96::3c]:80/TCP 1",
		"LoadBalancer 192.0.2.10:80/TCP 1", "LoadBalancer [2001:db8::10]:80/TCP 1",
	}
	if diff := cmp.Diff(wantKeys, keys); diff != "" {
		t.Errorf("expected virtual servers (-want +got)\n%s", diff)
	}

	dual := ipvs.Table{
		entry("10.96.0.60", 80, ipvs.TCP, "rr", rs("10.244.1.11")),
		entry("192.0.2.10", 80, ipvs.TCP, "rr", rs("10.244.1.11")),
		entry("fd00:96::3c", 80, ipvs.TCP, "rr", rs("fd00:244::b")),
	}
	tests := []struct {
		name  string
		table ipvs.Table
		want  []string
	}{
		{name: "dual-stack table without the IPv6 LoadBalancer VIP", table: dual, want: []string{"2001:db8::10:80/TCP missing"}},
		{name: "dual-stack table complete", table: append(dual, entry("2001:db8::10", 80, ipvs.TCP, "rr", rs("fd00:244::b")))},
		{name: "IPv6 LoadBalancer VIP without real servers", table: append(dual, entry("2001:db8::10", 80, ipvs.TCP, "rr")),
			want: []string{"2001:db8::10:80/TCP no-real-servers"}},
		{name: "single-stack IPv4 kube-proxy", table: dual[:2]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range Compare(onlyFamilies(exp, tc.table), tc.table, "rr") {
				got = append(got, f.VIP+":"+itoa(f.Port)+"/"+f.Protocol+" "+f.Problem)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestEndpointSlicesReadOnlyForEmptyVirtualServers: the check asks for
// EndpointSlices only for the Services of virtual servers without real
// servers, and only once those have had none for the settle grace (a new
// Service has none until its pods are ready); a table where every virtual
// server has real servers needs no EndpointSlice at all.
func TestEndpointSlicesReadOnlyForEmptyVirtualServers(t *testing.T) {
	svcs, eps := fixtureCluster()
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tbl := fixtureTable()
	tbl[2].Real = []ipvs.RealServer{rs("10.0.2.15")} // kubernetes: every virtual server has real servers
	fake := ipvstest.NewFake(tbl)
	var asked [][]string
	c, err := NewChecker(Config{IPVS: fake, ReadLink: fixtureLink, Cluster: fakeCluster{svcs: svcs, eps: eps, asked: &asked}, NodeName: node,
		Scheduler: func(context.Context) (string, string) { return "lc", kubeproxy.FromConfigz },
		Settle:    &check.Settler{Grace: 30 * time.Second, Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(wantReason string) {
		t.Helper()
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason != wantReason {
			t.Fatalf("reason %s (%s), want %s", res.Reason, res.Message, wantReason)
		}
	}
	run(ReasonOK)
	if len(asked) != 0 {
		t.Fatalf("read EndpointSlices for a table where every virtual server has real servers: %v", asked)
	}
	tbl[3].Real = nil // 10.96.0.50:80 (default/web) has a ready endpoint but no real server
	fake.SetTable(tbl)
	run(ReasonOK)
	if len(asked) != 0 {
		t.Fatalf("read EndpointSlices before the settle grace: %v", asked)
	}
	clk.SetTime(clk.Now().Add(30 * time.Second))
	run(ReasonOK) // the finding itself now settles
	if want := [][]string{{"default/web"}}; !cmp.Equal(asked, want) {
		t.Fatalf("asked for %v, want %v", asked, want)
	}
	clk.SetTime(clk.Now().Add(30 * time.Second))
	run(ReasonNoRealServers)
}

// TestModuleNotLoadedWordedOnce: ip_vs not listed, or listed with no IPVS
// netlink family (a kernel without it), is one message, whichever the
// handle found on a run, so an unchanged node is never written again.
func TestModuleNotLoadedWordedOnce(t *testing.T) {
	noLink := func(name string) (kubeproxy.Link, error) { return kubeproxy.Link{Name: name}, nil }
	for _, link := range []kubeproxy.LinkReader{noLink, fixtureLink} {
		var msgs []string
		for _, cause := range []error{ipvs.ErrModuleNotLoaded, fmt.Errorf("%w: the IPVS netlink family is not registered", ipvs.ErrModuleNotLoaded)} {
			f := ipvstest.NewFake(nil)
			f.InjectError(cause)
			c, err := NewChecker(Config{IPVS: f, ReadLink: link, Distro: distro.Kubeadm})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, string(res.Status)+" "+res.Reason+" "+res.Message)
		}
		if msgs[0] != msgs[1] {
			t.Errorf("two wordings of one state:\n  %s\n  %s", msgs[0], msgs[1])
		}
	}
}

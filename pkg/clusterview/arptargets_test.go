// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

func l2Status(name, node, svcNS, svcName string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1",
		"kind":       "ServiceL2Status",
		"metadata":   map[string]any{"namespace": "metallb-system", "name": name},
		"status": map[string]any{
			"node": node, "serviceName": svcName, "serviceNamespace": svcNS,
			"interfaces": []any{map[string]any{"name": "eth0"}},
		},
	}}
}

func TestSyncAndARPTargets(t *testing.T) {
	cs := fake.NewClientset(
		lbService("default", "web", "192.0.2.20", "2001:db8::20"),
		lbService("default", "mine", "192.0.2.30"),
		lbService("other", "dns", "192.0.2.10"),
		node("a", true, `{"eth0":"02:00:00:00:00:0a"}`),
		node("b", true, `{"eth0":"02:00:00:00:00:0b"}`),
		node("c", true, ""),
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}},
		// Never read: kube-proxy programs neither (ipvscheck.ProxiedEndpointSlices).
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "headless-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "headless", corev1.IsHeadlessService: ""}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "other", ipvscheck.ServiceProxyNameLabel: "cilium"}}},
		// The agents' peers Service: a and b run ipvs-guard (c does not).
		peersSlice("ipvs-guard", "peers", "a", "b"),
	)
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: ServiceL2StatusGVR.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: ServiceL2StatusGVR.Resource, Namespaced: true, Kind: "ServiceL2Status"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{ServiceL2StatusGVR: "ServiceL2StatusList"},
		l2Status("l2-web", "b", "default", "web"),
		l2Status("l2-mine", "a", "default", "mine"),
	)
	v := New("a", kubetest.FromClientset(cs), dyn, metaOf(cs))
	v.UsePeersService(types.NamespacedName{Namespace: "ipvs-guard", Name: "peers"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer v.Shutdown()
	defer cancel()
	if err := v.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if !v.HasServiceL2Status() {
		t.Fatal("ServiceL2Status not discovered")
	}

	type target struct {
		IP, Node, Service string
	}
	targets := func(k int) []target {
		ts, err := v.ARPTargets(k)(ctx)
		if err != nil {
			t.Fatalf("ARPTargets(%d): %v", k, err)
		}
		var out []target
		for _, tg := range ts {
			if tg.ExpectedMACs != nil {
				t.Errorf("%s: expected MACs %v in the target: the checker reads them once a reply came", tg.IP, tg.ExpectedMACs)
			}
			out = append(out, target{tg.IP.String(), tg.ExpectedNode, tg.Service})
		}
		return out
	}

	// Every IP of both families (IPv6 ones are probed with NDP) but the one
	// node a announces itself (192.0.2.30).
	want := []target{
		{IP: "192.0.2.10", Service: "other/dns"},
		{IP: "192.0.2.20", Node: "b", Service: "default/web"},
		{IP: "2001:db8::20", Node: "b", Service: "default/web"},
	}
	if diff := cmp.Diff(want, targets(0)); diff != "" {
		t.Errorf("unsharded targets (-want +got):\n%s", diff)
	}

	// Sharded to one prober per IP over the peers (the endpoints of the
	// peers Service: c runs no agent): exactly the IPs the assigner gives
	// node a, the same on a second run (answered from the memo).
	assign := shard.NewAssigner([]string{"a", "b"}, 1)
	var wantSharded []string
	for _, w := range want {
		if slices.Contains(assign.Probers(shard.IP{Addr: netip.MustParseAddr(w.IP), Announcer: w.Node}), "a") {
			wantSharded = append(wantSharded, w.IP)
		}
	}
	for run := range 2 {
		var gotSharded []string
		for _, tg := range targets(1) {
			gotSharded = append(gotSharded, tg.IP)
		}
		if diff := cmp.Diff(wantSharded, gotSharded); diff != "" {
			t.Errorf("run %d: sharded targets (-want +got):\n%s", run, diff)
		}
	}

	// The ipvs check reads Services and EndpointSlices from the same caches.
	svcs, err := v.IPVSCluster().Services(ctx)
	if err != nil || len(svcs) != 3 {
		t.Errorf("IPVSCluster().Services() = %d services, %v; want 3", len(svcs), err)
	}
	// EndpointSlices are read on demand, for the Services asked for only,
	// and never those kube-proxy does not program.
	for _, asked := range [][]string{{"default/web"}, {"default/web", "default/headless", "default/other"}} {
		eps, err := v.IPVSCluster().EndpointSlices(ctx, asked)
		if err != nil || len(eps) != 1 || eps[0].Name != "web-abc" {
			t.Errorf("IPVSCluster().EndpointSlices(%v) = %v, %v; want web-abc", asked, eps, err)
		}
	}

	dir := v.MACDirectory()
	macs := dir.NodeMACs(ctx, "b", false)
	if len(macs) != 1 || macs[0].String() != "02:00:00:00:00:0b" {
		t.Fatalf("NodeMACs(b) = %v", macs)
	}
	if n, ok := dir.NodeForMAC(ctx, macs[0], false); !ok || n != "b" {
		t.Errorf("NodeForMAC(%s) = %q, %v", macs[0], n, ok)
	}
}

// TestARPTargetsFollowWithdrawal checks that the sharded targets follow the
// announcer without a restart: while node a announces an IP it never probes
// it; once MetalLB withdraws the ServiceL2Status (no speaker may announce
// it), a is eligible again and, where it outranks one of the two probers,
// takes that prober's place. Each agent recomputes its share on every probe
// from what its informers hold, so it needs no notice of the change.
func TestARPTargetsFollowWithdrawal(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	// An IP whose two probers change when a stops announcing it.
	var ip netip.Addr
	for i := 1; i < 255 && !ip.IsValid(); i++ {
		cand := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		if slices.Contains(shard.Probers(cand, nodes, 2, ""), "a") {
			ip = cand
		}
	}
	if !ip.IsValid() {
		t.Fatal("no IP in 192.0.2.0/24 where a is among the two probers")
	}
	cs := fake.NewClientset(
		lbService("default", "web", ip.String()),
		node("a", true, `{"eth0":"02:00:00:00:00:0a"}`),
		node("b", true, `{"eth0":"02:00:00:00:00:0b"}`),
		node("c", true, `{"eth0":"02:00:00:00:00:0c"}`),
		peersSlice("ipvs-guard", "peers", nodes...),
	)
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: ServiceL2StatusGVR.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: ServiceL2StatusGVR.Resource, Namespaced: true, Kind: "ServiceL2Status"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{ServiceL2StatusGVR: "ServiceL2StatusList"},
		l2Status("l2-web", "a", "default", "web"),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	views := map[string]*View{}
	for _, n := range nodes {
		v := New(n, kubetest.FromClientset(cs), dyn, metaOf(cs))
		v.UsePeersService(types.NamespacedName{Namespace: "ipvs-guard", Name: "peers"})
		defer v.Shutdown()
		if err := v.Sync(ctx); err != nil {
			t.Fatalf("Sync %s: %v", n, err)
		}
		views[n] = v
	}
	// probers returns the nodes whose view gives them ip, once every view
	// sees announcer (the informers deliver the change asynchronously).
	probers := func(announcer string) []string {
		t.Helper()
		for ctx.Err() == nil {
			var out []string
			seen := true
			for _, n := range nodes {
				ings, err := views[n].LoadBalancerIngresses()
				if err != nil || len(ings) != 1 || ings[0].AnnouncingNode != announcer {
					seen = false
					break
				}
				ts, err := views[n].ARPTargets(2)(ctx)
				if err != nil {
					t.Fatalf("ARPTargets on %s: %v", n, err)
				}
				if len(ts) == 1 && ts[0].IP == ip {
					out = append(out, n)
				}
			}
			if seen {
				return out
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the views never all saw announcer %q", announcer)
		return nil
	}

	if diff := cmp.Diff([]string{"b", "c"}, probers("a")); diff != "" {
		t.Errorf("probers while a announces %s (-want +got):\n%s", ip, diff)
	}
	if err := dyn.Resource(ServiceL2StatusGVR).Namespace("metallb-system").Delete(ctx, "l2-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := shard.Probers(ip, nodes, 2, "")
	slices.Sort(want)
	got := probers("")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("probers once no node announces %s (-want +got):\n%s", ip, diff)
	}
	if !slices.Contains(got, "a") {
		t.Errorf("a, which announced %s until MetalLB withdrew it, does not probe it: %v", ip, got)
	}
}

// TestARPTargetsWhileMetalLBMovesAnIP: while MetalLB moves an IP, the
// Service has a ServiceL2Status from the new speaker and one from the old
// for a moment. Which one the cache lists last must not decide the
// verdict: the IP is then judged with no expected announcer (no wrong
// responder named from a stale status), by neither contender, and it is
// not called unannounced. Two statuses naming one node are that node.
func TestARPTargetsWhileMetalLBMovesAnIP(t *testing.T) {
	type target struct{ IP, Node, Unannounced string }
	tests := []struct {
		name     string
		self     string
		statuses []*unstructured.Unstructured
		want     []target
		contend  []string
	}{
		{"old listed first", "a", []*unstructured.Unstructured{l2Status("l2-aaa", "b", "default", "web"), l2Status("l2-zzz", "c", "default", "web")},
			[]target{{IP: "192.0.2.20"}}, []string{"b", "c"}},
		{"new listed first", "a", []*unstructured.Unstructured{l2Status("l2-aaa", "c", "default", "web"), l2Status("l2-zzz", "b", "default", "web")},
			[]target{{IP: "192.0.2.20"}}, []string{"b", "c"}},
		{"three at once", "a", []*unstructured.Unstructured{l2Status("l2-aaa", "c", "default", "web"), l2Status("l2-mmm", "d", "default", "web"), l2Status("l2-zzz", "b", "default", "web")},
			[]target{{IP: "192.0.2.20"}}, []string{"b", "c", "d"}},
		{"this node a contender", "b", []*unstructured.Unstructured{l2Status("l2-aaa", "b", "default", "web"), l2Status("l2-zzz", "c", "default", "web")},
			nil, []string{"b", "c"}},
		{"the same node twice", "a", []*unstructured.Unstructured{l2Status("l2-aaa", "b", "default", "web"), l2Status("l2-zzz", "b", "default", "web")},
			[]target{{IP: "192.0.2.20", Node: "b"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(lbService("default", "web", "192.0.2.20"))
			cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
				GroupVersion: ServiceL2StatusGVR.GroupVersion().String(),
				APIResources: []metav1.APIResource{{Name: ServiceL2StatusGVR.Resource, Namespaced: true, Kind: "ServiceL2Status"}},
			}}
			var objs []runtime.Object
			for _, st := range tt.statuses {
				objs = append(objs, st)
			}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{ServiceL2StatusGVR: "ServiceL2StatusList"}, objs...)
			v := New(tt.self, kubetest.FromClientset(cs), dyn, metaOf(cs))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer v.Shutdown()
			defer cancel()
			if err := v.Sync(ctx); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			ings, err := v.LoadBalancerIngresses()
			if err != nil || len(ings) != 1 {
				t.Fatalf("LoadBalancerIngresses() = %v, %v", ings, err)
			}
			if diff := cmp.Diff(tt.contend, ings[0].Contenders); diff != "" {
				t.Errorf("contenders (-want +got):\n%s", diff)
			}
			ts, err := v.ARPTargets(0)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []target
			for _, tg := range ts {
				got = append(got, target{tg.IP.String(), tg.ExpectedNode, tg.Unannounced})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
}

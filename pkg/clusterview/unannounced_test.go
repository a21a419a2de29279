// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

func endpointSlice(svc string, ready bool, nodes ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for _, n := range nodes {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{NodeName: &n, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return es
}

func TestUnannounced(t *testing.T) {
	local := lbService("default", "local", "192.0.2.40")
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	idle := lbService("default", "idle", "192.0.2.41")
	idle.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	cs := fake.NewClientset(
		lbService("default", "web", "192.0.2.20"),
		local, idle,
		endpointSlice("local", true, "d", "c", "d"),
		endpointSlice("idle", false, "c"),
	)
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: ServiceL2StatusGVR.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: ServiceL2StatusGVR.Resource, Namespaced: true, Kind: "ServiceL2Status"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{ServiceL2StatusGVR: "ServiceL2StatusList"})
	v := New("a", kubetest.FromClientset(cs), dyn, metaOf(cs))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer v.Shutdown()
	defer cancel()
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	const none = "MetalLB announces it from no node (no ServiceL2Status): "
	tests := []struct {
		name string
		in   LoadBalancerIngress
		want string
	}{
		{name: "announced", in: LoadBalancerIngress{Service: types.NamespacedName{Namespace: "default", Name: "web"}, AnnouncingNode: "b"}},
		{name: "cluster policy", in: LoadBalancerIngress{Service: types.NamespacedName{Namespace: "default", Name: "web"}},
			want: none + "no speaker can announce it on a node its L2Advertisement selects (check the advertisement's nodeSelectors and interfaces, and that the speakers run: kubectl -n metallb-system get servicel2statuses,l2advertisements; speaker logs)"},
		{name: "local policy, endpoints on nodes without speaker", in: LoadBalancerIngress{Service: types.NamespacedName{Namespace: "default", Name: "local"}},
			want: none + "externalTrafficPolicy is Local, so only a node with a ready endpoint and a running speaker may announce it, and its ready endpoints are on c, d, where no speaker announces it"},
		{name: "local policy, no ready endpoint", in: LoadBalancerIngress{Service: types.NamespacedName{Namespace: "default", Name: "idle"}},
			want: none + "externalTrafficPolicy is Local, so only a node with a ready endpoint and a running speaker may announce it, and no node has a ready endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.IP = netip.MustParseAddr("192.0.2.20")
			if got := v.Unannounced(context.Background(), tt.in); got != tt.want {
				t.Errorf("Unannounced() = %q\nwant            %q", got, tt.want)
			}
		})
	}

	// Without MetalLB's ServiceL2Status CRD nothing can be said.
	plainCS := fake.NewClientset(lbService("default", "web", "192.0.2.20"))
	plain := New("a", kubetest.FromClientset(plainCS), nil, metaOf(plainCS))
	pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer plain.Shutdown()
	defer pcancel()
	if err := plain.Sync(pctx); err != nil {
		t.Fatal(err)
	}
	if got := plain.Unannounced(context.Background(), LoadBalancerIngress{Service: types.NamespacedName{Namespace: "default", Name: "web"}}); got != "" {
		t.Errorf("without the CRD: %q, want empty", got)
	}
}

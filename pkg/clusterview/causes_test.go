// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

// metallbObj builds a MetalLB object (or a Pod) as the dynamic client returns it.
func metallbObj(kind, name string, lbls map[string]string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": kind, "spec": spec}}
	u.SetName(name)
	u.SetNamespace(DefaultMetalLBNamespace)
	u.SetLabels(lbls)
	return u
}

func speakerPod(node string, ready bool) *unstructured.Unstructured {
	status := "False"
	if ready {
		status = "True"
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"spec":   map[string]any{"nodeName": node},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": status}}}}}
	u.SetName("speaker-" + node)
	u.SetNamespace(DefaultMetalLBNamespace)
	u.SetLabels(map[string]string{"app": "metallb", "component": "speaker"})
	return u
}

func clusterNode(name string, lbls map[string]string, netUnavailable bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	if netUnavailable {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}
	}
	return n
}

var metallbListKinds = map[schema.GroupVersionResource]string{
	ServiceL2StatusGVR: "ServiceL2StatusList", IPAddressPoolGVR: "IPAddressPoolList",
	L2AdvertisementGVR: "L2AdvertisementList", podsGVR: "PodList",
}

func TestExplain(t *testing.T) {
	excl := map[string]string{ExcludeFromLoadBalancersLabel: ""}
	pool24 := metallbObj("IPAddressPool", "pool", map[string]string{"tier": "l2"}, map[string]any{"addresses": []any{"192.0.2.0/24"}})
	adAll := metallbObj("L2Advertisement", "l2", nil, map[string]any{})
	threeNodes := []runtime.Object{clusterNode("a", nil, false), clusterNode("b", nil, false), clusterNode("c", nil, false)}
	speakersAB := []runtime.Object{speakerPod("a", true), speakerPod("b", true)}
	web := lbService("default", "web", "192.0.2.20")
	local := lbService("default", "web", "192.0.2.20")
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	epC := endpointSlice("web", true, "c")
	labelled := lbService("default", "web", "192.0.2.20")
	labelled.Labels = map[string]string{"app": "web"}
	shared := lbService("default", "web", "192.0.2.20")
	shared.Labels = map[string]string{"app": "web"}
	shared.Annotations = map[string]string{AllowSharedIPAnnotation: "k"}
	svcSel := func(name, app string) *unstructured.Unstructured {
		return metallbObj("L2Advertisement", name, nil, map[string]any{"serviceSelectors": []any{map[string]any{"matchLabels": map[string]any{"app": app}}}})
	}
	join := func(groups ...[]runtime.Object) []runtime.Object {
		var out []runtime.Object
		for _, g := range groups {
			out = append(out, g...)
		}
		return out
	}
	tests := []struct {
		name      string
		kube      []runtime.Object // Nodes, Services, EndpointSlices
		metallb   []runtime.Object // pools, advertisements, speaker Pods
		noCRDs    bool
		announcer string
		want      string   // Cause.Reason
		says      []string // in Cause.Message
	}{
		{name: "eligible nodes but no announcement", kube: join(threeNodes, []runtime.Object{web, epC}), metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want: CauseSpeakerNotAnnouncing, says: []string{"let a, b announce", "metallb-system/l2", "any interface"}},
		{name: "from no pool", kube: join(threeNodes, []runtime.Object{web, epC}),
			metallb: join([]runtime.Object{metallbObj("IPAddressPool", "other", nil, map[string]any{"addresses": []any{"198.51.100.0/24", "192.0.2.30-192.0.2.40"}}), adAll}, speakersAB),
			want:    CauseNotFromPool, says: []string{"192.0.2.20 is in no IPAddressPool in metallb-system", "Service default/web"}},
		{name: "pool by range", kube: join(threeNodes, []runtime.Object{web, epC}),
			metallb: join([]runtime.Object{metallbObj("IPAddressPool", "range", nil, map[string]any{"addresses": []any{"192.0.2.10-192.0.2.30"}}), adAll}, speakersAB),
			want:    CauseSpeakerNotAnnouncing},
		{name: "no advertisement for the pool", kube: join(threeNodes, []runtime.Object{web, epC}),
			metallb: join([]runtime.Object{pool24, metallbObj("L2Advertisement", "l2", nil, map[string]any{"ipAddressPools": []any{"other"}})}, speakersAB),
			want:    CauseNoL2Advertisement, says: []string{"IPAddressPool metallb-system/pool is selected by no L2Advertisement"}},
		{name: "advertisement by pool selector", kube: join(threeNodes, []runtime.Object{web, epC}),
			metallb: join([]runtime.Object{pool24, metallbObj("L2Advertisement", "l2", nil, map[string]any{"ipAddressPoolSelectors": []any{map[string]any{"matchLabels": map[string]any{"tier": "l2"}}}})}, speakersAB),
			want:    CauseSpeakerNotAnnouncing},
		{name: "service selectors exclude the Service", kube: join(threeNodes, []runtime.Object{labelled, epC}),
			metallb: join([]runtime.Object{pool24, svcSel("db-only", "db"), svcSel("cache-only", "cache")}, speakersAB),
			want:    CauseServiceSelectors, says: []string{"no L2Advertisement selects this Service", "L2Advertisement metallb-system/db-only (serviceSelectors: app=db)", "metallb-system/cache-only (serviceSelectors: app=cache)", "Service default/web's labels (app=web)"}},
		{name: "service selectors and no labels", kube: join(threeNodes, []runtime.Object{web, epC}),
			metallb: join([]runtime.Object{pool24, svcSel("db-only", "db")}, speakersAB),
			want:    CauseServiceSelectors, says: []string{"labels (none)"}},
		{name: "one advertisement selects the Service", kube: join(threeNodes, []runtime.Object{labelled, epC}),
			metallb: join([]runtime.Object{pool24, svcSel("db-only", "db"), svcSel("web-only", "web")}, speakersAB),
			want:    CauseSpeakerNotAnnouncing, says: []string{"metallb-system/web-only"}},
		{name: "an advertisement without service selectors selects every Service", kube: join(threeNodes, []runtime.Object{labelled, epC}),
			metallb: join([]runtime.Object{pool24, svcSel("db-only", "db"), adAll}, speakersAB),
			want:    CauseSpeakerNotAnnouncing, says: []string{"metallb-system/l2"}},
		{name: "allow-shared-ip with service selectors", kube: join(threeNodes, []runtime.Object{shared, epC}),
			metallb: join([]runtime.Object{pool24, svcSel("web-only", "web")}, speakersAB),
			want:    CauseSharedIPWithServiceSelectors, says: []string{"metallb.io/allow-shared-ip", "metallb-system/web-only (serviceSelectors: app=web)"}},
		{name: "no ready endpoint", kube: join(threeNodes, []runtime.Object{web, endpointSlice("web", false, "a")}), metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want: CauseNoReadyEndpoints, says: []string{"Service default/web has no ready endpoint"}},
		{name: "node selectors match nothing", kube: join(threeNodes, []runtime.Object{web, epC}),
			metallb: join([]runtime.Object{pool24, metallbObj("L2Advertisement", "l2", nil, map[string]any{"nodeSelectors": []any{map[string]any{"matchLabels": map[string]any{"l2": "yes"}}}})}, speakersAB),
			want:    CauseNodeSelectors, says: []string{"nodeSelectors of L2Advertisement metallb-system/l2"}},
		{name: "speaker nodes excluded by label", kube: []runtime.Object{clusterNode("a", excl, false), clusterNode("b", excl, false), clusterNode("c", nil, false), web, epC},
			metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want:    CauseExcludedByLabel, says: []string{"a, b labelled node.kubernetes.io/exclude-from-external-load-balancers", "c without a ready speaker Pod"}},
		{name: "label outranks NetworkUnavailable", kube: []runtime.Object{clusterNode("a", nil, true), clusterNode("b", excl, false), clusterNode("c", nil, false), web, epC},
			metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want:    CauseExcludedByLabel, says: []string{"b labelled", "a with NetworkUnavailable=True"}},
		{name: "network unavailable", kube: []runtime.Object{clusterNode("a", nil, true), clusterNode("b", nil, true), clusterNode("c", nil, false), web, epC},
			metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want:    CauseNetworkUnavailable, says: []string{"a, b with NetworkUnavailable=True"}},
		{name: "no ready speaker", kube: join(threeNodes, []runtime.Object{web, epC}),
			metallb: []runtime.Object{pool24, adAll, speakerPod("a", false)},
			want:    CauseNoReadySpeaker, says: []string{"a, b, c without a ready speaker Pod (kubectl -n metallb-system get pods -l app=metallb,component=speaker"}},
		{name: "only selected nodes count", kube: []runtime.Object{clusterNode("a", map[string]string{"l2": "yes"}, false), clusterNode("b", nil, false), web, epC},
			metallb: []runtime.Object{pool24, metallbObj("L2Advertisement", "l2", nil, map[string]any{"nodeSelectors": []any{map[string]any{"matchLabels": map[string]any{"l2": "yes"}}}}), speakerPod("b", true)},
			want:    CauseNoReadySpeaker, says: []string{"a without a ready speaker"}},
		{name: "local endpoints on a node without speaker", kube: join(threeNodes, []runtime.Object{local, epC}), metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want: CauseLocalEndpointsWithoutSpeaker, says: []string{"ready endpoints are on c (no ready speaker)", "eligible nodes are a, b"}},
		{name: "local endpoint on an eligible node", kube: join(threeNodes, []runtime.Object{local, endpointSlice("web", true, "b")}), metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want: CauseSpeakerNotAnnouncing, says: []string{"let b announce"}},
		{name: "announcer excluded", announcer: "a", kube: []runtime.Object{clusterNode("a", excl, false), clusterNode("b", nil, false), web, epC},
			metallb: join([]runtime.Object{pool24, adAll}, speakersAB),
			want:    CauseAnnouncerIneligible, says: []string{"node a", "labelled node.kubernetes.io/exclude-from-external-load-balancers"}},
		{name: "announcer eligible", announcer: "b", kube: join(threeNodes, []runtime.Object{web, epC}), metallb: join([]runtime.Object{pool24, adAll}, speakersAB)},
		{name: "no MetalLB CRDs", noCRDs: true, kube: join(threeNodes, []runtime.Object{web, epC}),
			want: CauseUnknown, says: []string{"no ServiceL2Status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(tt.kube...)
			cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
				GroupVersion: ServiceL2StatusGVR.GroupVersion().String(),
				APIResources: []metav1.APIResource{{Name: ServiceL2StatusGVR.Resource, Namespaced: true, Kind: "ServiceL2Status"}},
			}}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), metallbListKinds, tt.metallb...)
			if tt.noCRDs {
				dyn.PrependReactor("list", IPAddressPoolGVR.Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewNotFound(IPAddressPoolGVR.GroupResource(), "")
				})
			}
			v := New("self", kubetest.FromClientset(cs), dyn, metaOf(cs))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer v.Shutdown()
			defer cancel()
			if err := v.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			got := v.Explain(ctx, LoadBalancerIngress{IP: netip.MustParseAddr("192.0.2.20"), Service: types.NamespacedName{Namespace: "default", Name: "web"}, AnnouncingNode: tt.announcer})
			if got.Reason != tt.want {
				t.Fatalf("Explain() = %q (%s), want reason %q", got.Reason, got.Message, tt.want)
			}
			for _, s := range tt.says {
				if !strings.Contains(got.Message, s) {
					t.Errorf("Explain() message %q does not say %q", got.Message, s)
				}
			}
			if tt.want == "" && got.Message != "" {
				t.Errorf("Explain() message %q, want none", got.Message)
			}
		})
	}
}

// TestExplainReadsOncePerTTL checks that the MetalLB state is read once per
// TTL however many IPs ask, and read again after it.
func TestExplainReadsOncePerTTL(t *testing.T) {
	cs := fake.NewClientset(clusterNode("a", nil, false), lbService("default", "web", "192.0.2.20"), endpointSlice("web", true, "a"))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), metallbListKinds,
		metallbObj("IPAddressPool", "pool", nil, map[string]any{"addresses": []any{"192.0.2.0/24"}}))
	v := New("self", kubetest.FromClientset(cs), dyn, metaOf(cs))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer v.Shutdown()
	defer cancel()
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	lists := func() int {
		n := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "list" && a.GetResource() == IPAddressPoolGVR {
				n++
			}
		}
		return n
	}
	in := LoadBalancerIngress{IP: netip.MustParseAddr("192.0.2.20"), Service: types.NamespacedName{Namespace: "default", Name: "web"}}
	for range 5 {
		if c := v.Explain(ctx, in); c.Reason != CauseNoL2Advertisement {
			t.Fatalf("Explain() = %+v, want %s", c, CauseNoL2Advertisement)
		}
	}
	if n := lists(); n != 1 {
		t.Errorf("%d pool LISTs for 5 explanations within the TTL, want 1", n)
	}
	v.metallb.mu.Lock()
	v.metallb.state.read = v.metallb.state.read.Add(-MetalLBStateTTL)
	v.metallb.mu.Unlock()
	v.Explain(ctx, in)
	if n := lists(); n != 2 {
		t.Errorf("%d pool LISTs after the TTL, want 2", n)
	}
}

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

func lbService(ns, name string, ips ...string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func node(name string, ready bool, macs string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if macs != "" {
		n.Annotations[nodestatus.MACsAnnotation] = macs
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"big"}}}
	return n
}

func TestClusterView(t *testing.T) {
	cs := fake.NewClientset(
		lbService("default", "web", "192.0.2.20", "192.0.2.3", "not-an-ip"),
		lbService("other", "dns", "192.0.2.10"),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}},
		node("a", true, `{"eth0":"02:00:00:00:00:0a"}`),
		node("b", true, `{"eth0":"02:00:00:00:00:0b","eth1":"02:00:00:00:01:0b"}`),
		node("c", false, `not json`),
	)
	v := New("a", kubetest.FromClientset(cs), nil, metaOf(cs))
	if _, err := v.LoadBalancerIngresses(); !errors.Is(err, ErrNotSynced) {
		t.Errorf("before sync: %v, want ErrNotSynced", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	v.Start(ctx.Done())
	defer v.Shutdown() // after cancel: Shutdown waits for the informers to stop
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), v.HasSynced) {
		t.Fatal("caches did not sync")
	}
	ings, err := v.LoadBalancerIngresses()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range ings {
		got = append(got, in.IP.String()+" "+in.Service.String())
	}
	if diff := cmp.Diff([]string{"192.0.2.3 default/web", "192.0.2.10 other/dns", "192.0.2.20 default/web"}, got); diff != "" {
		t.Errorf("ingresses (-want +got):\n%s", diff)
	}
	if peers, err := v.Peers(); err != nil || !cmp.Equal(peers, []string{"a"}) {
		t.Errorf("peers without a peers Service = %v, %v; want only this node", peers, err)
	}
	own, err := v.Node()
	if err != nil || own.Name != "a" || own.Status.Images != nil {
		t.Errorf("own node = %+v, %v (images must be stripped)", own, err)
	}
}

// metaOf serves the Nodes of cs as PartialObjectMetadata, as the API
// server's metadata-only watches do.
func metaOf(cs *fake.Clientset) metadata.Interface {
	scheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(scheme)
	nodes, _ := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("nodes"), corev1.SchemeGroupVersion.WithKind("Node"), "")
	var out []runtime.Object
	if l, ok := nodes.(*corev1.NodeList); ok {
		for _, n := range l.Items {
			out = append(out, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: *n.ObjectMeta.DeepCopy()})
		}
	}
	return metadatafake.NewSimpleMetadataClient(scheme, out...)
}

// TestStripKeepsWhatChecksRead: the cache transforms drop what no check
// reads and keep what they do.
func TestStripKeepsWhatChecksRead(t *testing.T) {
	svc := lbService("default", "web", "192.0.2.20")
	svc.Annotations = map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "p", corev1.LastAppliedConfigAnnotation: "{}"}
	svc.Labels = map[string]string{"app": "web", ipvscheck.ServiceProxyNameLabel: "other"}
	got, _ := stripService(svc)
	want := lbService("default", "web", "192.0.2.20")
	// A LoadBalancer Service keeps its labels (L2Advertisement serviceSelectors).
	want.Labels = map[string]string{"app": "web", ipvscheck.ServiceProxyNameLabel: "other"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("service (-want +got):\n%s", diff)
	}
	plain := svc.DeepCopy()
	plain.Spec.Type = corev1.ServiceTypeClusterIP
	plain.Status.LoadBalancer.Ingress = nil
	if got, _ := stripService(plain); !maps.Equal(got.(*corev1.Service).Labels, map[string]string{ipvscheck.ServiceProxyNameLabel: "other"}) {
		t.Errorf("ClusterIP service keeps labels %v, want only the proxy-name label", got.(*corev1.Service).Labels)
	}

	ready, node, zone := true, "a", "z1"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-x", Labels: map[string]string{discoveryv1.LabelServiceName: "web", "endpointslice.kubernetes.io/managed-by": "x"},
			Annotations: map[string]string{"a": "b"}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node, Zone: &zone,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}}},
	}
	gotSl, _ := stripEndpointSlice(sl)
	wantSl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-x", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node}},
	}
	if diff := cmp.Diff(wantSl, gotSl); diff != "" {
		t.Errorf("endpoint slice (-want +got):\n%s", diff)
	}
}

// TestStripServiceFields: what the ipvs check reads of a Service survives
// the cache transform; what it does not read is dropped.
func TestStripServiceFields(t *testing.T) {
	local, vip := corev1.ServiceInternalTrafficPolicyLocal, corev1.LoadBalancerIPModeVIP
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u-1", ResourceVersion: "42", Generation: 3},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
			ExternalIPs: []string{"203.0.113.1"}, Selector: map[string]string{"app": "web"}, SessionAffinity: corev1.ServiceAffinityClientIP,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, InternalTrafficPolicy: &local, HealthCheckNodePort: 31000},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &vip, Hostname: "lb.example"}}},
			Conditions: []metav1.Condition{{Type: "x"}}},
	}
	got, _ := stripService(svc)
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: "42"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
			ExternalIPs:           []string{"203.0.113.1"},
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, InternalTrafficPolicy: &local},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &vip}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("service (-want +got):\n%s", diff)
	}
	if e := ipvscheck.ExpectedVirtualServers([]*corev1.Service{got.(*corev1.Service)}, nil, "n"); len(e) != 2*4 {
		t.Errorf("expected virtual servers from the stripped Service: %d, want 8 (2 ports × 2 cluster IPs, external IP, ingress IP)", len(e))
	}
}

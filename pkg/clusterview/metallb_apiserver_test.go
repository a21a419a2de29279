// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package clusterview

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/metallbtest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// TestExplainAgainstAPIServer reads MetalLB's state on demand from a real
// API server with MetalLB v0.16.2's own CRDs, as the agent's ServiceAccount
// under deploy/rbac (nothing forbidden, nothing watched): an IP whose pool
// no L2Advertisement selects, then, with one, nodes MetalLB may not use
// (one without a ready speaker, one labelled
// node.kubernetes.io/exclude-from-external-load-balancers, one with
// NetworkUnavailable=True), each read once per TTL.
func TestExplainAgainstAPIServer(t *testing.T) {
	paths := metallbtest.DefaultPaths(filepath.Join("..", ".."))
	_, err := os.Stat(filepath.Join(paths.CRDs, "metallb.io_ipaddresspools.yaml"))
	testenv.Require(t, err == nil, "MetalLB's CRDs (hack/metallb/install.sh)")
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	adminDyn := dynamic.NewForConfigOrDie(s.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := metallbtest.Install(ctx, s, paths, admin, adminDyn, "192.0.2.200-192.0.2.220"); err != nil {
		t.Fatal(err)
	}
	rbac := filepath.Join("..", "..", "deploy", "rbac")
	if err := s.Apply(ctx, filepath.Join(rbac, "serviceaccount.yaml"), filepath.Join(rbac, "rbac.yaml")); err != nil {
		t.Fatal(err)
	}

	for _, n := range []struct {
		name   string
		labels map[string]string
		netOff bool
	}{{name: "a"}, {name: "b", labels: map[string]string{ExcludeFromLoadBalancersLabel: ""}}, {name: "c", netOff: true}} {
		node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: n.labels}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.netOff {
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated", LastTransitionTime: metav1.Now()}}
			if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		pod, err := admin.CoreV1().Pods(metallbtest.Namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "speaker-" + n.name, Labels: map[string]string{"app": "metallb", "component": "speaker"}},
			Spec:       corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "speaker", Image: "quay.io/metallb/speaker:" + metallbtest.Version}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := corev1.ConditionTrue
		if n.name == "a" {
			ready = corev1.ConditionFalse
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.Now()}}}
		if _, err := admin.CoreV1().Pods(metallbtest.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.201"}}
	if _, err := admin.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, nodeA := true, "a"
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-x", Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &nodeA, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The agent's identity (deploy/rbac), requests logged.
	tr, err := admin.CoreV1().ServiceAccounts("ipvs-guard").CreateToken(ctx, "ipvs-guard", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var log apiservertest.RequestLog
	cfg := log.Wrap(s.Config(tr.Status.Token))
	v := New("self", apiservertest.AgentClient(t, cfg), dynamic.NewForConfigOrDie(cfg), nil)
	// Stop the informers and wait for them before the test ends: a later
	// test of this package swaps klog's global logger (captureKlog), which
	// must not happen under a running informer.
	defer func() {
		cancel()
		if !v.Shutdown() {
			t.Error("the view's informers did not stop")
		}
	}()
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	in := LoadBalancerIngress{IP: netip.MustParseAddr("192.0.2.201"), Service: types.NamespacedName{Namespace: "default", Name: "web"}}

	got := v.Explain(ctx, in)
	if got.Reason != CauseNoL2Advertisement || !strings.Contains(got.Message, "IPAddressPool metallb-system/pool is selected by no L2Advertisement") {
		t.Fatalf("without an L2Advertisement: %+v", got)
	}
	if err := metallbtest.ApplyL2Advertisement(ctx, adminDyn, "l2", nil); err != nil {
		t.Fatal(err)
	}
	// Within the TTL the answer stands; after it, the advertisement is seen.
	if again := v.Explain(ctx, in); again != got {
		t.Errorf("within the TTL: %+v, want %+v", again, got)
	}
	v.SetMetalLB("", "", time.Millisecond)
	time.Sleep(2 * time.Millisecond)
	got = v.Explain(ctx, in)
	t.Logf("with an L2Advertisement: %s: %s", got.Reason, got.Message)
	if got.Reason != CauseExcludedByLabel {
		t.Fatalf("reason %q, want %q (%s)", got.Reason, CauseExcludedByLabel, got.Message)
	}
	for _, want := range []string{"b labelled node.kubernetes.io/exclude-from-external-load-balancers", "c with NetworkUnavailable=True", "a without a ready speaker Pod"} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("message %q does not say %q", got.Message, want)
		}
	}

	// What it cost: LISTs only (twice each: once per TTL), nothing watched,
	// nothing forbidden.
	reqs := log.Responses()
	counts := map[string]int{}
	for _, r := range reqs {
		if strings.HasSuffix(r, " Forbidden") {
			t.Errorf("forbidden: %s", r)
		}
		counts[r]++
	}
	for _, prefix := range []string{
		"/apis/metallb.io/v1beta1/namespaces/metallb-system/ipaddresspools",
		"/apis/metallb.io/v1beta1/namespaces/metallb-system/l2advertisements",
		"/api/v1/namespaces/metallb-system/pods",
		"/api/v1/nodes",
	} {
		n := 0
		for _, u := range log.Requests(prefix) {
			if !strings.Contains(u, "watch=true") && !strings.Contains(u, "fieldSelector") {
				n++
			}
		}
		if n != 2 {
			t.Errorf("%s: %d LISTs, want 2 (one per TTL)", prefix, n)
		}
	}
	for _, u := range log.Requests("/api") {
		if strings.Contains(u, "watch=true") && (strings.Contains(u, "ipaddresspools") || strings.Contains(u, "l2advertisements") || strings.Contains(u, "/pods") || strings.Contains(u, "/api/v1/nodes?") && !strings.Contains(u, "fieldSelector")) {
			t.Errorf("watched: %s", u)
		}
	}
}

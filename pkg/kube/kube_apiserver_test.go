// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package kube_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// contentTypes records the Content-Type of every response.
type contentTypes struct {
	mu  sync.Mutex
	got map[string]bool
}

func (c *contentTypes) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				c.mu.Lock()
				c.got[req.Method+" "+resp.Header.Get("Content-Type")] = true
				c.mu.Unlock()
			}
			return resp, err
		})
	}
	return cfg
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestClientAgainstAPIServer runs every request ipvs-guard makes through
// pkg/kube against a real kube-apiserver, in protobuf as the agent speaks.
func TestClientAgainstAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ct := &contentTypes{got: map[string]bool{}}
	cfg := ct.wrap(s.AdminConfig())
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := admin.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := true
	eps := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Data: map[string]string{"config.conf": "mode: ipvs\n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Reads.
	if l, err := cs.Services("").List(ctx, metav1.ListOptions{}); err != nil || !slices.ContainsFunc(l.Items, func(s corev1.Service) bool { return s.Name == "web" }) {
		t.Errorf("listing Services: %v, %v", l, err)
	}
	if l, err := cs.EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"}); err != nil || len(l.Items) != 1 {
		t.Errorf("listing EndpointSlices by label: %v, %v", l, err)
	}
	if cm, err := cs.ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err != nil || cm.Data["config.conf"] != "mode: ipvs\n" {
		t.Errorf("getting the kube-proxy ConfigMap: %v, %v", cm, err)
	}
	if l, err := cs.Nodes().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "node-b").String()}); err != nil || len(l.Items) != 1 || l.Items[0].Name != "node-b" {
		t.Errorf("listing Nodes by field selector: %v, %v", l, err)
	}
	if _, err := cs.Nodes().Get(ctx, "nowhere", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("getting a missing Node: %v, want NotFound", err)
	}

	// Writes: a strategic-merge patch of the status, a merge patch of the metadata.
	if _, err := cs.Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType,
		[]byte(`{"status":{"conditions":[{"type":"StrictARPDisabled","status":"False","reason":"StrictARP"}]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patching node status: %v", err)
	}
	if _, err := cs.Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching node metadata: %v", err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil || n.Annotations["x"] != "y" || len(n.Status.Conditions) != 1 {
		t.Errorf("node after the patches: %+v, %v", n, err)
	}

	// Watch, through an informer as the agent's view builds them.
	inf := kube.NewInformer(cs.Services(""), &corev1.Service{}, kube.InformerOptions{Client: cs})
	seen := make(chan string, 10)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o any) { seen <- o.(*corev1.Service).Name }})
	go inf.Run(ctx.Done())
	svc2 := svc.DeepCopy()
	svc2.Name = "later"
	if _, err := admin.CoreV1().Services("default").Create(ctx, svc2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for got := map[string]bool{}; !got["web"] || !got["later"]; {
		select {
		case name := <-seen:
			got[name] = true
		case <-ctx.Done():
			t.Fatalf("informer saw %v, want web and later", got)
		}
	}

	// Discovery of a group version, served and not.
	if l, err := cs.ServerResourcesForGroupVersion(ctx, "discovery.k8s.io/v1"); err != nil || !slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == "endpointslices" }) {
		t.Errorf("discovering discovery.k8s.io/v1: %v, %v", l, err)
	}
	if _, err := cs.ServerResourcesForGroupVersion(ctx, "metallb.io/v1beta1"); !apierrors.IsNotFound(err) {
		t.Errorf("discovering metallb.io/v1beta1 without its CRD: %v, want NotFound", err)
	}

	// Events: one, then an isomorphic one counted into its series.
	rec := kube.NewRecorder(cs, "ipvs-guard")
	go rec.Run(ctx)
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-a", UID: n.UID}
	rec.Eventf(ref, nil, corev1.EventTypeWarning, "ModulesNotLoaded", "IPVSModulesMissing", "%s is not loaded", "ip_vs_sh")
	rec.Eventf(ref, nil, corev1.EventTypeWarning, "ModulesNotLoaded", "IPVSModulesMissing", "%s is not loaded", "ip_vs_rr")
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The API server writes Events of its own here (its ClusterIP
		// repair, for one): count only the agent's.
		l, err := admin.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		var ours []eventsv1.Event
		if err == nil {
			for _, ev := range l.Items {
				if ev.ReportingController == "ipvs-guard" {
					ours = append(ours, ev)
				}
			}
		}
		if len(ours) == 1 && ours[0].Series != nil && ours[0].Series.Count == 2 {
			ev := ours[0]
			if ev.Note != "ip_vs_sh is not loaded" || ev.Regarding.Name != "node-a" || ev.ReportingController != "ipvs-guard" || ev.Action != "IPVSModulesMissing" {
				t.Errorf("Event %+v", ev)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Events: %v, %v; want one with a series of 2", l, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	ct.mu.Lock()
	defer ct.mu.Unlock()
	for _, want := range []string{"GET application/vnd.kubernetes.protobuf", "PATCH application/vnd.kubernetes.protobuf", "POST application/vnd.kubernetes.protobuf", "GET application/json"} {
		if !ct.got[want] {
			t.Errorf("no %q response; got %v", want, ct.got)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// applyManifests applies the YAML files as the admin.
func applyManifests(t *testing.T, s *apiservertest.Server, files ...string) {
	t.Helper()
	if err := s.Apply(context.Background(), files...); err != nil {
		t.Fatal(err)
	}
}

func deployDir() string { return filepath.Join("..", "..", "deploy", "rbac") }

// podToken returns a token for the ipvs-guard ServiceAccount bound to a Pod
// scheduled on node (as kubelet would project into the pod).
func podToken(t *testing.T, admin kubernetes.Interface, node string) string {
	t.Helper()
	ctx := context.Background()
	pod, err := admin.CoreV1().Pods("ipvs-guard").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ipvs-guard-"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "ipvs-guard", NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "agent", Image: "ipvs-guard:test"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts("ipvs-guard").CreateToken(ctx, "ipvs-guard", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func unboundToken(t *testing.T, admin kubernetes.Interface) string {
	t.Helper()
	tr, err := admin.CoreV1().ServiceAccounts("ipvs-guard").CreateToken(context.Background(), "ipvs-guard",
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

const conditionPatch = `{"status":{"conditions":[{"type":"IPVSModulesMissing","status":"False","reason":"ModulesLoaded","message":"ok.","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`

func TestRBACAndAdmissionPolicy(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	// MetalLB's namespace, which the Role ipvs-guard-metallb lives in.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyManifests(t, s, filepath.Join(deployDir(), "serviceaccount.yaml"), filepath.Join(deployDir(), "rbac.yaml"),
		filepath.Join(deployDir(), "admission-policy.yaml"))
	createNode(t, admin, "node-a")
	createNode(t, admin, "node-b")
	agentA := kubernetes.NewForConfigOrDie(s.Config(podToken(t, admin, "node-a")))

	patchStatus := func(cs kubernetes.Interface, node string) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(conditionPatch), metav1.PatchOptions{}, "status")
		return err
	}
	patchMeta := func(cs kubernetes.Interface, node, body string) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	// The policy is loaded asynchronously: wait until it denies.
	eventually(t, 30*time.Second, "the admission policy to take effect", func() bool {
		return apierrors.IsForbidden(patchStatus(agentA, "node-b")) || apierrors.IsInvalid(patchStatus(agentA, "node-b"))
	})

	denied := func(err error) bool { return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) }
	tests := []struct {
		name      string
		do        func() error
		wantAllow bool
	}{
		{"patch own node status", func() error { return patchStatus(agentA, "node-a") }, true},
		{"patch other node status", func() error { return patchStatus(agentA, "node-b") }, false},
		{"annotate own node", func() error {
			return patchMeta(agentA, "node-a", `{"metadata":{"annotations":{"ipvs-guard.io/macs":"{}"}}}`)
		}, true},
		{"annotate other node", func() error {
			return patchMeta(agentA, "node-b", `{"metadata":{"annotations":{"ipvs-guard.io/macs":"{}"}}}`)
		}, false},
		{"label own node", func() error { return patchMeta(agentA, "node-a", `{"metadata":{"labels":{"x":"y"}}}`) }, false},
		{"taint own node", func() error {
			return patchMeta(agentA, "node-a", `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`)
		}, false},
		{"unbound token patches a node", func() error {
			return patchStatus(kubernetes.NewForConfigOrDie(s.Config(unboundToken(t, admin))), "node-a")
		}, false},
		{"list nodes", func() error { _, err := agentA.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }, true},
		{"list services", func() error { _, err := agentA.CoreV1().Services("").List(ctx, metav1.ListOptions{}); return err }, true},
		{"list endpointslices", func() error {
			_, err := agentA.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		}, true},
		{"delete own node", func() error { return agentA.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}) }, false},
		{"list secrets", func() error { _, err := agentA.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err }, false},
		{"list pods", func() error { _, err := agentA.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }, false},
		{"get configmap", func() error {
			_, err := agentA.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
			return err
		}, false},
		{"create service", func() error {
			_, err := agentA.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if tt.wantAllow && err != nil {
				t.Errorf("denied: %v", err)
			}
			if !tt.wantAllow && !denied(err) {
				t.Errorf("want a denial by the API server, got %v", err)
			}
			if err != nil {
				t.Logf("denied: %v", err)
			}
		})
	}

	// What RBAC grants, asked of the real authorizer: exactly the documented list.
	type attr struct{ verb, group, resource, sub, ns string }
	allowed := map[attr]bool{}
	for _, a := range []attr{
		{"get", "", "nodes", "", ""}, {"list", "", "nodes", "", ""}, {"watch", "", "nodes", "", ""}, {"patch", "", "nodes", "", ""},
		{"patch", "", "nodes", "status", ""},
		{"list", "", "services", "", ""}, {"watch", "", "services", "", ""},
		{"list", "discovery.k8s.io", "endpointslices", "", ""}, {"watch", "discovery.k8s.io", "endpointslices", "", "ipvs-guard"},
		{"list", "metallb.io", "servicel2statuses", "", ""}, {"watch", "metallb.io", "servicel2statuses", "", ""},
		{"create", "events.k8s.io", "events", "", "default"}, {"patch", "events.k8s.io", "events", "", "default"},
		{"list", "metallb.io", "ipaddresspools", "", "metallb-system"}, {"list", "metallb.io", "l2advertisements", "", "metallb-system"},
		{"list", "", "pods", "", "metallb-system"},
		// The HTTPS metrics endpoint's reviews of each scraper.
		{"create", "authentication.k8s.io", "tokenreviews", "", ""}, {"create", "authorization.k8s.io", "subjectaccessreviews", "", ""},
	} {
		allowed[a] = true
	}
	var probes []attr
	for a := range allowed {
		probes = append(probes, a)
	}
	for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
		for _, r := range []attr{
			{"", "", "nodes", "", ""}, {"", "", "nodes", "status", ""}, {"", "", "services", "", "default"}, {"", "", "services", "status", "default"},
			{"", "", "pods", "", "default"}, {"", "", "secrets", "", "kube-system"}, {"", "", "configmaps", "", "kube-system"},
			{"", "", "events", "", "default"}, {"", "events.k8s.io", "events", "", "kube-system"}, {"", "events.k8s.io", "events", "", "default"},
			{"", "metallb.io", "servicel2statuses", "", "metallb-system"}, {"", "discovery.k8s.io", "endpointslices", "", ""}, {"", "discovery.k8s.io", "endpointslices", "", "default"}, {"", "discovery.k8s.io", "endpointslices", "", "ipvs-guard"},
			{"", "apps", "daemonsets", "", "ipvs-guard"}, {"", "rbac.authorization.k8s.io", "clusterroles", "", ""},
			{"", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", ""}, {"", "", "serviceaccounts", "token", "ipvs-guard"},
			{"", "", "pods", "", "metallb-system"}, {"", "", "pods", "", ""}, {"", "", "secrets", "", "metallb-system"},
			{"", "metallb.io", "ipaddresspools", "", "metallb-system"}, {"", "metallb.io", "ipaddresspools", "", ""},
			{"", "metallb.io", "l2advertisements", "", "metallb-system"}, {"", "metallb.io", "l2advertisements", "", "default"},
			{"", "authentication.k8s.io", "tokenreviews", "", ""}, {"", "authorization.k8s.io", "subjectaccessreviews", "", ""},
		} {
			r.verb = v
			probes = append(probes, r)
		}
	}
	for _, p := range probes {
		want := allowed[p] || allowed[attr{p.verb, p.group, p.resource, p.sub, ""}]
		ssar, err := agentA.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.sub, Namespace: p.ns}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ssar.Status.Allowed != want {
			t.Errorf("%+v: allowed=%v, want %v", p, ssar.Status.Allowed, want)
		}
	}

	// The kube-proxy ConfigMap, by name, is the only ConfigMap it may read.
	for _, tc := range []struct {
		verb, name string
		want       bool
	}{{"get", "kube-proxy", true}, {"get", "kubeadm-config", false}, {"update", "kube-proxy", false}, {"list", "", false}} {
		ssar, err := agentA.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: tc.verb, Resource: "configmaps", Namespace: "kube-system", Name: tc.name}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ssar.Status.Allowed != tc.want {
			t.Errorf("%s configmap kube-system/%s: allowed=%v, want %v", tc.verb, tc.name, ssar.Status.Allowed, tc.want)
		}
	}

	// The agent's own publisher works under these rules end to end.
	cs := apiservertest.AgentClient(t, s.Config(podToken(t, admin, "node-a")))
	m, err := nodestatus.NewManager(nodestatus.ManagerConfig{NodeName: "node-a", Client: nodestatus.NewClient(cs)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetConditions([]nodestatus.Condition{{Type: nodestatus.StrictARPDisabled, Status: nodestatus.StatusTrue, Reason: "ArpIgnoreNotStrict", Message: "arp_ignore=0."}})
	m.SetAnnotation(nodestatus.MACsAnnotation, `{"eth0":"02:00:00:00:00:0a"}`)
	if err := m.Sync(ctx); err != nil {
		t.Fatalf("publishing as the agent: %v", err)
	}
	mB, _ := nodestatus.NewManager(nodestatus.ManagerConfig{NodeName: "node-b", Client: nodestatus.NewClient(cs)})
	mB.SetConditions([]nodestatus.Condition{{Type: nodestatus.StrictARPDisabled, Status: nodestatus.StatusTrue, Reason: "X", Message: "x."}})
	if err := mB.Sync(ctx); !denied(err) {
		t.Errorf("agent on node-a publishing node-b's status: %v, want denied", err)
	}
}

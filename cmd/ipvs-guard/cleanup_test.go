// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

func TestCleanupNodes(t *testing.T) {
	node := func(name string, anns map[string]string, types ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: anns}}
		for _, ty := range types {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(ty), Status: corev1.ConditionFalse})
		}
		return n
	}
	cs := fake.NewClientset(
		node("a", map[string]string{"ipvs-guard.io/macs": "eth0=aa:bb:cc:dd:ee:ff", "ipvs-guard.io/macs-down": "{}", "keep": "1"}, "Ready", "IPVSModulesMissing", "KubeProxyIPVSDegraded", "StrictARPDisabled", "LoadBalancerARPFailing"),
		node("b", nil, "Ready", "DiskPressure"),
		node("c", map[string]string{"ipvs-guard.io/macs": "x"}, "LoadBalancerARPFailing"),
	)
	if err := cleanupNodes(context.Background(), kubetest.FromClientset(cs)); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, name := range []string{"a", "b", "c"} {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		left := []string{}
		for _, c := range n.Status.Conditions {
			left = append(left, string(c.Type))
		}
		for k := range n.Annotations {
			left = append(left, "annotation "+k)
		}
		got[name] = left
	}
	want := map[string][]string{"a": {"Ready", "annotation keep"}, "b": {"Ready", "DiskPressure"}, "c": {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("left on the Nodes (-want +got):\n%s", diff)
	}
	// b carried nothing of ipvs-guard's: listed, never patched.
	var patched []string
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" {
			patched = append(patched, a.(interface{ GetName() string }).GetName()+"/"+a.GetSubresource())
		}
	}
	if diff := cmp.Diff([]string{"a/status", "a/", "c/status", "c/"}, patched); diff != "" {
		t.Errorf("patches (-want +got):\n%s", diff)
	}
}

// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestNewScheme(t *testing.T) {
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		obj  runtime.Object
		want bool
	}{
		{&corev1.Service{}, true},
		{&corev1.ServiceList{}, true},
		{&corev1.Node{}, true},
		{&corev1.ConfigMap{}, true},
		{&discoveryv1.EndpointSlice{}, true},
		{&discoveryv1.EndpointSliceList{}, true},
		{&eventsv1.Event{}, true},
		{&authenticationv1.TokenReview{}, true},
		{&authorizationv1.SubjectAccessReview{}, true},
		{&metav1.ListOptions{}, true},
		{&metav1.Status{}, true},
		{&metav1.WatchEvent{}, true},
		{&appsv1.Deployment{}, false}, // no group the product does not use
	}
	for _, tt := range tests {
		_, _, err := s.ObjectKinds(tt.obj)
		if got := err == nil; got != tt.want {
			t.Errorf("%T registered = %v, want %v (%v)", tt.obj, got, tt.want, err)
		}
	}
	// The parameter codec encodes list options for every group version served.
	pc := runtime.NewParameterCodec(s)
	for _, gv := range []string{"v1", "discovery.k8s.io/v1", "events.k8s.io/v1"} {
		v, err := pc.EncodeParameters(&metav1.ListOptions{LabelSelector: "a=b", FieldSelector: "metadata.name=n", Watch: true}, mustGV(t, gv))
		if err != nil {
			t.Fatalf("%s: %v", gv, err)
		}
		if v.Get("labelSelector") != "a=b" || v.Get("fieldSelector") != "metadata.name=n" || v.Get("watch") != "true" {
			t.Errorf("%s: list options encoded as %v", gv, v)
		}
	}
}

func mustGV(t *testing.T, s string) schema.GroupVersion {
	t.Helper()
	gv, err := schema.ParseGroupVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return gv
}

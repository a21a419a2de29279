// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package clusterview

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
)

// TestEndpointsOnDemandAgainstAPIServer reads EndpointSlices on demand from
// the real API server: only the Services asked for (a same-named Service in
// another namespace, a headless Service's and another proxy's slices are
// left out), 50 names per LIST, each answer reused until the TTL and read
// again after it, and nothing watched.
func TestEndpointsOnDemandAgainstAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := func(ns, svc string, labels map[string]string) {
		t.Helper()
		l := map[string]string{discoveryv1.LabelServiceName: svc}
		for k, v := range labels {
			l[k] = v
		}
		_, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: svc + "-x", Namespace: ns, Labels: l},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	for i := range 120 {
		name := fmt.Sprintf("svc-%03d", i)
		slice("default", name, nil)
		asked = append(asked, "default/"+name)
	}
	slice("other", "svc-000", nil)
	slice("default", "headless", map[string]string{corev1.IsHeadlessService: ""})
	slice("default", "elsewhere", map[string]string{ipvscheck.ServiceProxyNameLabel: "other-proxy"})
	asked = append(asked, "default/headless", "default/elsewhere", "default/no-such")

	var log apiservertest.RequestLog
	e := newEndpointsOnDemand(apiservertest.AgentClient(t, log.Wrap(s.AdminConfig())), true)
	clk := testingclock.NewFakePassiveClock(time.Now())
	e.clock = clk
	names := func(eps []*discoveryv1.EndpointSlice) []string {
		var out []string
		for _, es := range eps {
			out = append(out, es.Namespace+"/"+es.Name)
		}
		slices.Sort(out)
		return out
	}
	var want []string
	for i := range 120 {
		want = append(want, fmt.Sprintf("default/svc-%03d-x", i))
	}
	for round, wantLists := range []int{3, 3, 6} {
		if round == 2 {
			clk.SetTime(clk.Now().Add(EndpointsTTL))
		}
		got, err := e.get(ctx, asked)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, names(got)); diff != "" {
			t.Fatalf("round %d: EndpointSlices (-want +got):\n%s", round, diff)
		}
		if lists := log.Requests("/apis/discovery.k8s.io/v1/endpointslices"); len(lists) != wantLists {
			t.Fatalf("round %d: %d LISTs in all, want %d (123 names, 50 a LIST, reread after the TTL): %v", round, len(lists), wantLists, lists)
		}
	}
	for _, r := range log.Requests("/") {
		if strings.Contains(r, "watch=true") || strings.Contains(r, "watch=1") {
			t.Errorf("watched: %s", r)
		}
	}
	// With current, Services no longer asked for are forgotten at once.
	if _, err := e.get(ctx, asked[:1]); err != nil {
		t.Fatal(err)
	}
	if n := len(e.memo); n != 1 {
		t.Errorf("memo keeps %d Services after asking for 1", n)
	}
	// Asking for none (the check's run while every virtual server has real
	// servers) forgets them all and sends nothing.
	before := len(log.Requests("/"))
	if got, err := e.get(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("get(none) = %v, %v", got, err)
	}
	if n := len(e.memo); n != 0 {
		t.Errorf("memo keeps %d Services after asking for none", n)
	}
	if after := len(log.Requests("/")); after != before {
		t.Errorf("asking for none sent %d requests", after-before)
	}
}

// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

// hungAPIServer returns the rest config of an HTTP server that accepts
// every request and never answers it (until the test ends).
func hungAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return &rest.Config{Host: srv.URL}
}

// TestLoopRunsWhileTheAPIServerNeverAnswers: the discovery read for
// MetalLB's CRD happens before the loop starts and on every resync; an API
// server that accepts the request and never answers must stop neither the
// first check run nor the resyncs (the API being down never stops local
// checks), and Run still returns promptly on cancel.
func TestLoopRunsWhileTheAPIServerNeverAnswers(t *testing.T) {
	cfg := hungAPIServer(t)
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := clusterview.New("n", cs, dyn, nil)
	v.SetTimeouts(100*time.Millisecond, clusterview.InformerStopTimeout)
	var runs atomic.Int64
	c := check.Func{CheckName: check.NameModules, Fn: func(context.Context) (check.Result, error) {
		runs.Add(1)
		return check.Result{Name: check.NameModules, Status: check.StatusOK}, nil
	}}
	a, err := New(Config{NodeName: "n", Checkers: []check.Checker{c}, Publisher: &recordingPublisher{}, View: v, ResyncPeriod: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runLoop(t, a)
	waitUntil(t, "the check to run on three resyncs", func() bool { return runs.Load() >= 3 })
}

// blockingListWatch lists and watches nothing, and ignores its context
// until release is closed: an informer whose reflector does not stop when
// told to (client-go's sleeps out its watch-list backoff that way).
type blockingListWatch struct{ release <-chan struct{} }

func (b blockingListWatch) List(metav1.ListOptions) (runtime.Object, error) {
	<-b.release
	return &corev1.ServiceList{}, nil
}

func (b blockingListWatch) Watch(metav1.ListOptions) (watch.Interface, error) {
	<-b.release
	return watch.NewEmptyWatch(), nil
}

// TestRunStopsWhileAnInformerDoesNot: cancelling Run's context (SIGTERM)
// returns within the informer stop bound even when an informer ignores its
// stop channel.
func TestRunStopsWhileAnInformerDoesNot(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	cs := fake.NewClientset()
	v := clusterview.New("n", kubetest.FromClientset(cs), nil, nil)
	v.SetTimeouts(clusterview.DiscoveryTimeout, 200*time.Millisecond)
	v.AddInformer(cache.NewSharedIndexInformer(blockingListWatch{release}, &corev1.Service{}, 0, cache.Indexers{}))
	a, err := New(Config{NodeName: "n", Checkers: []check.Checker{&scriptedCheck{name: check.NameModules, seq: []scripted{{status: check.StatusOK}}}},
		Publisher: &recordingPublisher{}, View: v, ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	time.Sleep(100 * time.Millisecond)
	stopped := time.Now()
	cancel()
	select {
	case <-done:
		t.Logf("Run returned %s after cancel", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return within 3 s of cancel while an informer ignored its stop channel")
	}
}

// SPDX-License-Identifier: Apache-2.0

package kube_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

// guardedConfig is a client configuration for h's server with g installed.
func guardedConfig(h *kubetest.Hostile, g *kube.Guard) *rest.Config {
	cfg := &rest.Config{Host: h.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
	g.Install(cfg)
	return cfg
}

// peakHeap samples the heap in use every 5 ms until stop is called, and
// returns the largest sample above what was in use at the start.
func peakHeap() (stop func() uint64) {
	var (
		ms   runtime.MemStats
		peak uint64
		wg   sync.WaitGroup
	)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > base && m.HeapAlloc-base > peak {
				peak = m.HeapAlloc - base
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return peak }
}

// TestGuardEndlessList: a list answer that never ends is cut at the
// limit with ErrResponseTooLarge, the heap and the bytes read bounded by
// it (without the Guard the agent grew to 1.5 GB in 3 s), for the typed
// client (protobuf asked, JSON answered) and the dynamic one.
func TestGuardEndlessList(t *testing.T) {
	const limit = 8 << 20
	tests := []struct {
		name string
		list func(ctx context.Context, cfg *rest.Config) error
	}{
		{"typed", func(ctx context.Context, cfg *rest.Config) error {
			cs, err := kube.NewForConfig(cfg)
			if err != nil {
				return err
			}
			_, err = cs.Services("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"dynamic", func(ctx context.Context, cfg *rest.Config) error {
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			_, err = dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).List(ctx, metav1.ListOptions{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := kubetest.NewHostile(t, kubetest.EndlessList)
			g := &kube.Guard{ListLimit: limit}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stop := peakHeap()
			err := tt.list(ctx, guardedConfig(h, g))
			peak := stop()
			t.Logf("error: %v; peak heap %.1f MiB; server wrote %.1f MiB", err, float64(peak)/(1<<20), float64(h.Written())/(1<<20))
			if !errors.Is(err, kube.ErrResponseTooLarge) {
				t.Fatalf("List = %v, want ErrResponseTooLarge", err)
			}
			if !errors.Is(g.LastError(), kube.ErrResponseTooLarge) {
				t.Errorf("LastError = %v, want the refusal", g.LastError())
			}
			// Reading grows a buffer by doubling: at most about 2x the
			// limit, with the race detector's overhead on top.
			if peak > 6*limit {
				t.Errorf("peak heap %d MiB, want under %d MiB", peak>>20, 6*limit>>20)
			}
			if w := h.Written(); w > limit+(16<<20) { // + the connection's buffers
				t.Errorf("server wrote %d MiB, want about %d", w>>20, limit>>20)
			}
		})
	}
}

// TestGuardContinueTokens: client-go's pager (what an informer lists
// with) stops on a continue token it was given before, after two
// requests, and on pages without end once they pass PagesLimit together.
func TestGuardContinueTokens(t *testing.T) {
	tests := []struct {
		name        string
		mode        kubetest.HostileMode
		want        error
		maxRequests int64
	}{
		{"same continue token", kubetest.SameContinue, kube.ErrContinueRepeated, 2},
		{"fresh continue tokens without end", kubetest.FreshContinue, kube.ErrResponseTooLarge, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := kubetest.NewHostile(t, tt.mode)
			g := &kube.Guard{PagesLimit: 4 << 20}
			cs, err := kube.NewForConfig(guardedConfig(h, g))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (k8sruntime.Object, error) {
				return cs.Services("").List(ctx, opts)
			}))
			_, _, err = p.List(ctx, metav1.ListOptions{})
			t.Logf("error: %v after %d requests", err, h.Requests())
			if !errors.Is(err, tt.want) {
				t.Fatalf("pager.List = %v, want %v", err, tt.want)
			}
			if h.Requests() > tt.maxRequests {
				t.Errorf("%d requests, want at most %d", h.Requests(), tt.maxRequests)
			}
		})
	}
}

// TestGuardEndlessWatchEvent: a JSON watch event that never ends closes
// the watch at FrameLimit (client-go bounds protobuf events itself, JSON
// ones not).
func TestGuardEndlessWatchEvent(t *testing.T) {
	h := kubetest.NewHostile(t, kubetest.EndlessList)
	g := &kube.Guard{FrameLimit: 4 << 20}
	dyn, err := dynamic.NewForConfig(guardedConfig(h, g))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for range w.ResultChan() {
	}
	if ctx.Err() != nil {
		t.Fatal("the watch of an endless event did not end")
	}
	if !errors.Is(g.LastError(), kube.ErrResponseTooLarge) {
		t.Errorf("LastError = %v, want the refusal", g.LastError())
	}
	if w := h.Written(); w > 4<<20+(16<<20) {
		t.Errorf("server wrote %d MiB, want about 4", w>>20)
	}
}

// TestGuardProtobufWatchFrame: a protobuf watch frame whose length prefix
// declares more than FrameLimit ends the watch at its first read.
func TestGuardProtobufWatchFrame(t *testing.T) {
	var written atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
		n, _ := w.Write([]byte{0x40, 0, 0, 0}) // a 1 GiB frame
		written.Add(int64(n))
		zeros := make([]byte, 64<<10)
		for r.Context().Err() == nil {
			n, err := w.Write(zeros)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	g := &kube.Guard{}
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1,
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"}}
	g.Install(cfg)
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := cs.Services("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for range w.ResultChan() {
	}
	if ctx.Err() != nil {
		t.Fatal("the watch did not end")
	}
	if !errors.Is(g.LastError(), kube.ErrResponseTooLarge) {
		t.Errorf("LastError = %v, want the refusal", g.LastError())
	}
	if w := written.Load(); w > 16<<20 {
		t.Errorf("server wrote %d MiB, want far less", w>>20)
	}
}

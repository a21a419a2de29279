// SPDX-License-Identifier: Apache-2.0

package httpserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ipvs_guard_test_value", Help: "A test value."})
	g.Set(42)
	reg.MustRegister(g)
	ready := errors.New("informers not synced")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := New(ln.Addr().String(), NewHandler(Options{
		Gatherer: reg,
		Readyz:   func(*http.Request) error { return ready },
	}))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	tests := []struct {
		name       string
		method     string
		path       string
		wantStatus int
		wantBody   string
	}{
		{name: "metrics", method: "GET", path: "/metrics", wantStatus: 200, wantBody: "ipvs_guard_test_value 42"},
		{name: "healthz", method: "GET", path: "/healthz", wantStatus: 200, wantBody: "ok"},
		{name: "readyz failing", method: "GET", path: "/readyz", wantStatus: 503, wantBody: "not ok: informers not synced"},
		{name: "unknown path", method: "GET", path: "/debug/pprof/", wantStatus: 404},
		{name: "wrong method", method: "POST", path: "/metrics", wantStatus: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, base+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status: got %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("body %q does not contain %q", body, tt.wantBody)
			}
		})
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel: %v", err)
		}
	case <-time.After(ShutdownTimeout + 2*time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still answering after shutdown")
	}
}

func TestListenAndServeBadAddress(t *testing.T) {
	err := New("256.0.0.1:bad", NewHandler(Options{})).ListenAndServe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listening on 256.0.0.1:bad") {
		t.Errorf("got %v, want a listening error naming the address", err)
	}
}

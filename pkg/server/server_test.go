// SPDX-License-Identifier: Apache-2.0

package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"
)

func TestServer(t *testing.T) {
	ready := errors.New("first pass not done")
	s, err := New("127.0.0.1:0", nil, func() error { return ready })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, path string
		code       int
		body       string
	}{
		{"healthz", "/healthz", 200, "ok\n"},
		{"readyz failing", "/readyz", 503, "not ok: first pass not done\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(tt.path)
			if code != tt.code || body != tt.body {
				t.Errorf("GET %s = %d %q, want %d %q", tt.path, code, body, tt.code, tt.body)
			}
		})
	}
	ready = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("readyz after ready = %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestRunStopsWithARequestInFlight: a request that outlives the shutdown
// grace (a long profile, a client that never reads) neither holds Run past
// ShutdownTimeout nor keeps its connection.
func TestRunStopsWithARequestInFlight(t *testing.T) {
	s, err := New("127.0.0.1:0", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	s.Handle("/slow", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	clientErr := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		clientErr <- err
	}()
	<-started
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		if took := time.Since(stopped); took > ShutdownTimeout+time.Second {
			t.Errorf("Run returned %s after cancel, want about %s", took.Round(time.Millisecond), ShutdownTimeout)
		}
		if err == nil {
			t.Error("Run = nil, want the unfinished shutdown reported")
		}
	case <-time.After(ShutdownTimeout + 3*time.Second):
		t.Fatal("Run did not return after cancel with a request in flight")
	}
	select {
	case err := <-clientErr:
		if err == nil {
			t.Error("the request in flight got a response, want its connection closed")
		}
	case <-time.After(2 * time.Second):
		t.Error("the request in flight still holds its connection")
	}
}

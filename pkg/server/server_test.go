// SPDX-License-Identifier: Apache-2.0

package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
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

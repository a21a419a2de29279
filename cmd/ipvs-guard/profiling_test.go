// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestRunProfiling: with --profiling, every net/http/pprof handler is
// served on the health probe address, a CPU profile and a trace included
// (the API server may be away: the agent serves it anyway).
func TestRunProfiling(t *testing.T) {
	root := copyTestTree(t, "debian12")
	kc := writeKubeconfig(t, "https://"+closedPort(t))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, stop := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		code <- execute(ctx, []string{"run", "--kubeconfig", kc, "--node-name", "n1", "--root", root, "--no-uevents",
			"--health-probe-bind-address", addr, "--metrics-bind-address", "0", "--profiling"})
	}()
	defer func() {
		stop()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("exit %d", c)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not stop")
		}
	}()
	get := func(path string) (int, []byte) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				return resp.StatusCode, b
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", path, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	gzipped := func(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1f, 0x8b}) }
	tests := []struct {
		path string
		ok   func([]byte) bool
	}{
		{"/debug/pprof/", func(b []byte) bool { return bytes.Contains(b, []byte("goroutine")) }},
		{"/debug/pprof/heap", gzipped},
		{"/debug/pprof/goroutine?debug=1", func(b []byte) bool { return bytes.Contains(b, []byte("goroutine profile")) }},
		{"/debug/pprof/cmdline", func(b []byte) bool { return len(b) > 0 }},
		{"/debug/pprof/symbol", func(b []byte) bool { return bytes.Contains(b, []byte("num_symbols")) }},
		{"/debug/pprof/profile?seconds=1", gzipped},
		{"/debug/pprof/trace?seconds=0.2", func(b []byte) bool { return bytes.HasPrefix(b, []byte("go 1.")) }},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			status, body := get(tt.path)
			if status != http.StatusOK || !tt.ok(body) {
				t.Errorf("GET %s = %d, %d bytes: %.200q", tt.path, status, len(body), body)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package httpserver

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func status(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	same := freeAddr(t)
	tests := []struct {
		name string
		cfg  func() Config
		want map[string]int // "addr-key path" -> status (0: connection refused)
	}{
		{
			name: "separate addresses",
			cfg: func() Config {
				return Config{MetricsAddr: freeAddr(t), HealthAddr: freeAddr(t), Options: Options{Gatherer: reg}}
			},
			want: map[string]int{"metrics /metrics": 200, "metrics /healthz": 200, "health /healthz": 200, "health /readyz": 200, "health /metrics": 404},
		},
		{
			name: "one address serves everything",
			cfg:  func() Config { return Config{MetricsAddr: same, HealthAddr: same, Options: Options{Gatherer: reg}} },
			want: map[string]int{"metrics /metrics": 200, "health /readyz": 200},
		},
		{
			name: "metrics disabled",
			cfg: func() Config {
				return Config{MetricsAddr: Disabled, HealthAddr: freeAddr(t), Options: Options{Gatherer: reg}}
			},
			want: map[string]int{"health /healthz": 200, "health /metrics": 404},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg) }()
			addrs := map[string]string{"metrics": cfg.MetricsAddr, "health": cfg.HealthAddr}
			// Wait for the health server to answer.
			for deadline := time.Now().Add(5 * time.Second); status(cfg.HealthAddr, "/healthz") != 200 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			for key, want := range tt.want {
				which, path, _ := strings.Cut(key, " ")
				if got := status(addrs[which], path); got != want {
					t.Errorf("%s %s: got %d, want %d", which, path, got, want)
				}
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(ShutdownTimeout + 2*time.Second):
				t.Fatal("Run did not return after cancel")
			}
		})
	}
}

func TestRunAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- Run(context.Background(), Config{MetricsAddr: ln.Addr().String(), HealthAddr: freeAddr(t)})
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "listening on "+ln.Addr().String()) {
			t.Errorf("got %v, want a listening error naming the busy address", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not fail on a busy address and stop the other server")
	}
}

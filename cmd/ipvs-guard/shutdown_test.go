// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
)

// writeKubeconfig writes a kubeconfig naming server and returns its path.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: t
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`, server)
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// closedPort returns an address on which nothing listens (connection refused).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// blackhole returns the address of a TCP listener that accepts every
// connection and never reads from it nor answers (a firewall that lets
// SYNs through to a hung API server).
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// hungTLS returns the address of a TLS server that takes every request and
// never answers it (an overloaded or wedged API server).
func hungTLS(t *testing.T) string {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv.Listener.Addr().String()
}

// TestRunStopsOnSIGTERMWithoutAPIServer runs the real binary against an API
// server that is unreachable (connection refused) or blackholed (accepts
// TCP, never answers), sends SIGTERM once its informers are backing off,
// and wants exit 0 within 5 s: Kubernetes' default grace period is 30 s and
// client-go's reflector sleeps out its backoff (up to 30 s) without
// watching the stop channel.
func TestRunStopsOnSIGTERMWithoutAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent for several seconds")
	}
	bin := ipvsguardtest.Binary(t)
	root := copyTestTree(t, "debian12")
	tests := []struct {
		name   string
		server func(t *testing.T) string
	}{
		{"connection refused", closedPort},
		{"blackholed", blackhole},
		{"answers TLS, never HTTP", hungTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kc := writeKubeconfig(t, "https://"+tt.server(t))
			var out bytes.Buffer
			cmd := exec.Command(bin, "run", "--kubeconfig", kc, "--node-name", "n1", "--root", root,
				"--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0", "--no-uevents")
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// Long enough for the reflectors' backoff to reach several
			// seconds (0.8 s doubling, with jitter).
			select {
			case err := <-done:
				t.Fatalf("exited before SIGTERM: %v\n%s", err, out.String())
			case <-time.After(8 * time.Second):
			}
			sent := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				took := time.Since(sent)
				t.Logf("SIGTERM to exit: %s", took.Round(time.Millisecond))
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Errorf("exit code %d, want 0\n%s", ee.ExitCode(), out.String())
				} else if err != nil {
					t.Fatal(err)
				}
				if took > 5*time.Second {
					t.Errorf("exited %s after SIGTERM, want within 5 s", took.Round(time.Millisecond))
				}
			case <-time.After(40 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("still running 40 s after SIGTERM\n%s", out.String())
			}
		})
	}
}

func TestWaitBounded(t *testing.T) {
	failed := errors.New("serving: address in use")
	never := func() error { select {} }
	tests := []struct {
		name     string
		wait     func() error
		cancel   bool
		want     error
		maxDelay time.Duration
	}{
		{"a component fails while running", func() error { return failed }, false, failed, time.Second},
		{"stopped in time", func() error { return nil }, true, nil, time.Second},
		{"an error while stopping is not a failure", func() error { return failed }, true, nil, time.Second},
		{"a component that never stops", never, true, nil, 200*time.Millisecond + time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := tt.wait
			if tt.cancel {
				cancel()
				inner := wait
				wait = func() error { time.Sleep(10 * time.Millisecond); return inner() }
			}
			start := time.Now()
			if err := waitBounded(ctx, wait, 200*time.Millisecond); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Errorf("waitBounded = %v, want %v", err, tt.want)
			}
			if d := time.Since(start); d > tt.maxDelay {
				t.Errorf("waitBounded took %s", d)
			}
		})
	}
}

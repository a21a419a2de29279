// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeKubeProxy serves kube-proxy's metrics endpoints from files, as
// cmd/kube-proxy/app/server.go does (text/plain, no newline on /proxyMode).
func fakeKubeProxy(t *testing.T, proxyMode string, configzFile string) *httptest.Server {
	t.Helper()
	configz, err := os.ReadFile(configzFile)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := os.ReadFile("testdata/metrics-build-info.txt")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Write([]byte(proxyMode))
	})
	mux.HandleFunc("/configz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(configz)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Write(metrics)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestClientRealBodies(t *testing.T) {
	mode, err := os.ReadFile("testdata/proxyMode-ipvs.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := fakeKubeProxy(t, string(mode), "testdata/configz-ipvs-lc.json")
	c := NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second)
	ctx := context.Background()
	got, err := c.ProxyMode(ctx)
	if err != nil || got != "ipvs" {
		t.Fatalf("ProxyMode = %q, %v", got, err)
	}
	cfg, err := c.Configz(ctx)
	if err != nil || cfg.IPVS.Scheduler != "lc" || !cfg.IPVS.StrictARP {
		t.Fatalf("Configz = %+v, %v", cfg, err)
	}
	v, err := c.Version(ctx)
	if err != nil || v.GitVersion != "v1.37.1" {
		t.Fatalf("Version = %+v, %v", v, err)
	}
	if s, from := ResolveScheduler(ctx, "", ConfigzScheduler(c)); s != "lc" || from != FromConfigz {
		t.Errorf("ResolveScheduler = %q from %q", s, from)
	}
	if s, from := ResolveScheduler(ctx, "wrr", ConfigzScheduler(c)); s != "wrr" || from != FromFlag {
		t.Errorf("ResolveScheduler with override = %q from %q", s, from)
	}
}

func TestClientOldShapeAndIPTables(t *testing.T) {
	srv := fakeKubeProxy(t, "iptables", "testdata/configz-1.30-internal.json")
	c := NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second)
	got, err := c.ProxyMode(context.Background())
	if err != nil || got != "iptables" {
		t.Fatalf("ProxyMode = %q, %v", got, err)
	}
	cfg, err := c.Configz(context.Background())
	if err != nil || cfg.Mode != "ipvs" || cfg.IPVS.Scheduler != "wrr" || cfg.IPVS.StrictARP {
		t.Fatalf("Configz = %+v, %v", cfg, err)
	}
}

func TestClientUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there any more: connection refused
	c := NewClient(addr, time.Second)
	ctx := context.Background()
	if _, err := c.ProxyMode(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("ProxyMode err = %v, want ErrUnreachable", err)
	}
	if _, err := c.Configz(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Configz err = %v, want ErrUnreachable", err)
	}
	if s, from := ResolveScheduler(ctx, "", ConfigzScheduler(c)); s != "rr" || from != FromDefault {
		t.Errorf("ResolveScheduler = %q from %q, want rr from default", s, from)
	}
}

// TestClientGoingAway: a kube-proxy going away (SIGTERM on a restart or a
// mode switch) resets the connection of a request in flight, or closes it
// before answering; that is the same "nothing to look at" as a refused
// connection, not a failed check (the migration tier saw
// KubeProxyIPVSDegraded flip to Unknown on a restart, with each).
func TestClientGoingAway(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset bool
		want  error
	}{
		{"reset", true, syscall.ECONNRESET},
		{"closed before answering", false, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					conn, err := l.Accept()
					if err != nil {
						return
					}
					// Read the request, then close: with an RST (linger 0) or a FIN.
					_, _ = conn.Read(make([]byte, 4096))
					if tc.reset {
						_ = conn.(*net.TCPConn).SetLinger(0)
					}
					conn.Close()
				}
			}()
			c := NewClient(l.Addr().String(), time.Second)
			if _, err := c.ProxyMode(context.Background()); !errors.Is(err, ErrUnreachable) || !errors.Is(err, tc.want) {
				t.Fatalf("ProxyMode err = %v, want ErrUnreachable wrapping %v", err, tc.want)
			}
		})
	}
}

func TestClientNotFoundAndTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/proxyMode" {
			select {
			case <-block:
			case <-r.Context().Done():
			}
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(func() { close(block); srv.Close() })
	c := NewClient(strings.TrimPrefix(srv.URL, "http://"), 100*time.Millisecond)
	if _, err := c.Configz(context.Background()); err == nil || errors.Is(err, ErrUnreachable) {
		t.Errorf("404: err = %v, want a plain error", err)
	}
	if _, err := c.ProxyMode(context.Background()); err == nil || errors.Is(err, ErrUnreachable) {
		t.Errorf("timeout: err = %v, want a plain error", err)
	}
}

func TestSchedulerResolverRemembers(t *testing.T) {
	ctx := context.Background()
	answer, fail := "lc", false
	src := SchedulerSource{Name: FromConfigz, Get: func(context.Context) (string, error) {
		if fail {
			return "", ErrUnreachable
		}
		return answer, nil
	}}
	r := NewSchedulerResolver("", src)
	fail = true
	if s, from := r.Resolve(ctx); s != DefaultScheduler || from != FromDefault {
		t.Errorf("before any answer: %q from %q, want the default", s, from)
	}
	fail = false
	if s, from := r.Resolve(ctx); s != "lc" || from != FromConfigz {
		t.Errorf("answering: %q from %q", s, from)
	}
	fail = true
	if s, from := r.Resolve(ctx); s != "lc" || from != FromLastKnown+FromConfigz {
		t.Errorf("source gone: %q from %q, want the last known lc", s, from)
	}
	fail, answer = false, "sh"
	if s, _ := r.Resolve(ctx); s != "sh" {
		t.Errorf("changed config: %q, want sh", s)
	}
	if s, from := NewSchedulerResolver("wrr", src).Resolve(ctx); s != "wrr" || from != FromFlag {
		t.Errorf("override: %q from %q", s, from)
	}
}

// TestClientTimeoutCostsOneTimeout: a kube-proxy that accepts connections
// and never answers costs one timeout for every read in the next
// quietFactor timeouts (a diagnose run reads the port from four checks),
// then it is asked again; the caller's own context ending starts no quiet.
func TestClientTimeoutCostsOneTimeout(t *testing.T) {
	var requests atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	const timeout = 200 * time.Millisecond
	c := NewClient(strings.TrimPrefix(srv.URL, "http://"), timeout)
	now := time.Now()
	c.now = func() time.Time { return now }
	ctx := context.Background()

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.ProxyMode(cancelled); err == nil || errors.Is(err, ErrNotAnswering) {
		t.Fatalf("cancelled: %v", err)
	}
	start := time.Now()
	if _, err := c.ProxyMode(ctx); err == nil || errors.Is(err, ErrNotAnswering) {
		t.Fatalf("first read: err = %v, want its timeout", err)
	}
	sent := requests.Load()
	reads := []struct {
		name string
		read func() error
	}{
		{"/proxyMode", func() error { _, err := c.ProxyMode(ctx); return err }},
		{"/configz", func() error { _, err := c.Configz(ctx); return err }},
		{"/metrics", func() error { _, err := c.Version(ctx); return err }},
	}
	for _, r := range reads {
		if err := r.read(); !errors.Is(err, ErrNotAnswering) || !strings.Contains(err.Error(), r.name) {
			t.Errorf("%s after a timeout: err = %v, want ErrNotAnswering naming the path", r.name, err)
		}
	}
	if took := time.Since(start); took > 2*timeout {
		t.Errorf("four reads of a silent port took %s, want one timeout (%s)", took.Round(time.Millisecond), timeout)
	}
	if n := requests.Load(); n != sent {
		t.Errorf("%d requests sent during the quiet period", n-sent)
	}
	now = now.Add(quietFactor * timeout)
	if _, err := c.Configz(ctx); err == nil || errors.Is(err, ErrNotAnswering) {
		t.Errorf("after the quiet period: err = %v, want a new request's timeout", err)
	}
	if n := requests.Load(); n != sent+1 {
		t.Errorf("after the quiet period: %d requests, want 1", n-sent)
	}
}

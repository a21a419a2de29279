// SPDX-License-Identifier: Apache-2.0

package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"k8s.io/klog/v2"
)

// Check is a probe: nil means healthy, an error says why not.
type Check func() error

// Server is one HTTP server with timeouts.
type Server struct {
	mux *http.ServeMux
	srv *http.Server
	ln  net.Listener
}

// New listens on addr (":0" picks a free port) and returns a Server serving
// /healthz from healthz and /readyz from readyz (nil checks always pass).
func New(addr string, healthz, readyz Check) (*Server, error) {
	s, err := NewMux(addr)
	if err != nil {
		return nil, err
	}
	s.mux.Handle("/healthz", probe(healthz))
	s.mux.Handle("/readyz", probe(readyz))
	return s, nil
}

// NewMux listens on addr and returns a Server serving only what the caller
// mounts with Handle (e.g. the authorized /metrics).
func NewMux(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	return &Server{
		mux: mux,
		ln:  ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       90 * time.Second,
		},
	}, nil
}

// HandleProfiling mounts every handler of net/http/pprof under
// /debug/pprof/: the index and named profiles (heap, goroutine, allocs...),
// cmdline, profile (CPU), symbol and trace. The server's WriteTimeout does
// not cut a long profile: net/http/pprof extends the write deadline of a
// ?seconds=N request by N.
func (s *Server) HandleProfiling() {
	s.mux.HandleFunc("/debug/pprof/", pprof.Index)
	s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// Handle mounts another handler (e.g. /metrics) before Run.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// UseTLS makes Run serve HTTPS with cfg (see NewTLSConfig), HTTP/1.1 only.
func (s *Server) UseTLS(cfg *tls.Config) {
	s.srv.TLSConfig = cfg
	// A non-nil empty map keeps net/http from adding HTTP/2.
	s.srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// ShutdownTimeout is how long Run lets requests in flight finish once its
// context ends; then it closes their connections. A process stopping on
// SIGTERM has a few seconds in all (docs/design.md §8).
const ShutdownTimeout = 2 * time.Second

// Run serves until ctx is done, then shuts down gracefully
// (ShutdownTimeout at most, then the connections still open are closed).
// It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() {
		if s.srv.TLSConfig != nil {
			errc <- s.srv.ServeTLS(s.ln, "", "")
			return
		}
		errc <- s.srv.Serve(s.ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", s.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		// A request outlived the grace (a long profile, a slow client).
		_ = s.srv.Close()
		<-errc
		return fmt.Errorf("shutting down %s: %w", s.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	klog.FromContext(ctx).V(2).Info("HTTP server stopped", "addr", s.Addr())
	return nil
}

func probe(c Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if c != nil {
			if err := c(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ok: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
}

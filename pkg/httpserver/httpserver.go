// SPDX-License-Identifier: Apache-2.0

package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// ShutdownTimeout bounds how long Serve waits for in-flight requests once its
// context ends.
const ShutdownTimeout = 3 * time.Second

// Check reports whether a probe passes; a non-nil error fails it and its
// text is returned in the response body.
type Check func(r *http.Request) error

// Options say what the handler serves. A nil Gatherer leaves /metrics out; a
// nil Healthz or Readyz always passes.
type Options struct {
	// Gatherer is what /metrics exposes.
	Gatherer prometheus.Gatherer
	// Healthz is the liveness check behind /healthz.
	Healthz Check
	// Readyz is the readiness check behind /readyz.
	Readyz Check
}

// NewHandler returns a mux serving /metrics, /healthz and /readyz per opts.
func NewHandler(opts Options) http.Handler {
	mux := http.NewServeMux()
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
			ErrorHandling:       promhttp.ContinueOnError,
			MaxRequestsInFlight: 4,
			Timeout:             10 * time.Second,
		}))
	}
	mux.Handle("GET /healthz", probe(opts.Healthz))
	mux.Handle("GET /readyz", probe(opts.Readyz))
	return mux
}

func probe(c Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if c != nil {
			if err := c(r); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ok: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
}

// Server is one HTTP server with timeouts.
type Server struct {
	srv *http.Server
}

// New returns a server for handler listening on addr (host:port).
func New(addr string, handler http.Handler) *Server {
	return &Server{srv: &http.Server{
		Addr:              addr,
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    1 << 16,
	}}
}

// ListenAndServe listens on the server's address and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.srv.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.srv.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully within
// ShutdownTimeout. It returns nil after a shutdown caused by ctx and the
// serving error otherwise. It closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	logger := klog.FromContext(ctx).WithValues("address", ln.Addr().String())
	s.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	logger.V(1).Info("Serving HTTP")
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("shutting down HTTP server on %s: %w", ln.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP on %s: %w", ln.Addr(), err)
	}
	logger.V(1).Info("Stopped serving HTTP")
	return nil
}

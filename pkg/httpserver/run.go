// SPDX-License-Identifier: Apache-2.0

package httpserver

import (
	"context"
	"errors"
	"net/http"
	"sync"
)

// Disabled is the bind address that turns a server off
// (--metrics-bind-address=0), as in controller-runtime.
const Disabled = "0"

// Config is what `ipvs-guard run` serves: /metrics on MetricsAddr and
// /healthz + /readyz on HealthAddr. When both addresses are equal, one
// server serves all three; MetricsAddr "0" turns /metrics off.
type Config struct {
	// MetricsAddr is --metrics-bind-address.
	MetricsAddr string
	// HealthAddr is --health-probe-bind-address.
	HealthAddr string
	// Options are the gatherer and probe checks.
	Options Options
}

// Run serves per cfg until ctx ends and returns nil, or returns the first
// server's error (after stopping the other one).
func Run(ctx context.Context, cfg Config) error {
	metricsOn := cfg.MetricsAddr != "" && cfg.MetricsAddr != Disabled
	var servers []*Server
	switch {
	case metricsOn && cfg.MetricsAddr == cfg.HealthAddr:
		servers = append(servers, New(cfg.MetricsAddr, NewHandler(cfg.Options)))
	default:
		if metricsOn {
			servers = append(servers, New(cfg.MetricsAddr, NewHandler(Options{Gatherer: cfg.Options.Gatherer})))
		}
		if cfg.HealthAddr != "" && cfg.HealthAddr != Disabled {
			servers = append(servers, New(cfg.HealthAddr, probesOnly(cfg.Options)))
		}
	}
	if len(servers) == 0 {
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = s.ListenAndServe(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// probesOnly serves /healthz and /readyz but not /metrics.
func probesOnly(o Options) http.Handler {
	o.Gatherer = nil
	return NewHandler(o)
}

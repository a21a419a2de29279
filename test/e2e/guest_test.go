// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipvs-guard/ipvs-guard/internal/guestvm"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
)

// guest drives the guest node through its control endpoint
// (hack/e2e/guest-main.sh): each call runs a shell script there with
// hack/e2e/e2e-lib.sh sourced.
type guest struct{ *guestvm.Control }

func newGuest(url string) *guest { return &guest{guestvm.NewControl(url)} }

// run runs script in the guest and fails the test unless it exits 0.
func (g *guest) run(ctx context.Context, t testing.TB, script string) string {
	t.Helper()
	out, code, err := g.Exec(ctx, script)
	if err != nil {
		t.Fatalf("guest: %s: %v", firstLine(script), err)
	}
	if code != 0 {
		t.Fatalf("guest: %s: exit code %d:\n%s", firstLine(script), code, out)
	}
	return out
}

// waitReady waits until the control endpoint answers.
func (g *guest) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		short, c := context.WithTimeout(ctx, 5*time.Second)
		_, code, err := g.Exec(short, "true")
		c()
		if err == nil && code == 0 {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("guest control endpoint not up after %s: %v", timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// scrape reads the agent's /metrics (forwarded from the guest).
func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ipvsguardtest.Scrape(ctx, url)
}

// sample returns the value of the series of family name whose labels include
// every label in want, and whether there is one.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// hasSeries reports whether any series of family name carries label=value.
func hasSeries(mfs map[string]*dto.MetricFamily, name, label, value string) bool {
	_, ok := sample(mfs, name, map[string]string{label: value})
	return ok
}

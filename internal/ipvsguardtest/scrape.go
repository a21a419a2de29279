// SPDX-License-Identifier: Apache-2.0

package ipvsguardtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape reads an agent's /metrics at url, bounded by ctx.
func Scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	return ScrapeWithToken(ctx, url, "")
}

// insecureClient scrapes an agent's HTTPS /metrics without verifying its
// self-signed certificate, as the chart's ServiceMonitor does
// (insecureSkipVerify).
var insecureClient = &http.Client{Transport: &http.Transport{TLSClientConfig: InsecureTLS()}}

// InsecureTLS is the TLS configuration of a test's scraper of an agent's
// self-signed HTTPS endpoint: no verification.
func InsecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the agents' self-signed certificates
}

// ScrapeWithToken reads an agent's /metrics at url (http or https; the
// certificate is not verified) with token as the bearer token, if any.
func ScrapeWithToken(ctx context.Context, url, token string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := insecureClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("scraping %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return mfs, nil
}

// WaitFor polls fn every 100 ms until it returns true and returns how long
// that took; after timeout (or once ctx ends) it fails t with what it waited
// for and fn's last explanation.
func WaitFor(ctx context.Context, t testing.TB, what string, timeout time.Duration, fn func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		ok, why := fn()
		if ok {
			return time.Since(start)
		}
		last = why
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting until %s: %s", timeout, what, last)
	return 0
}

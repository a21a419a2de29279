// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// labels returns a label set of n labels: {l0="v",l1="v",…}.
func labels(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "l%d=\"v\"", i)
	}
	b.WriteByte('}')
	return b.String()
}

// TestParseSyncMetricsHostile: bodies built to make the exposition parser
// slow or large are skipped or refused within moments, never parsed whole.
func TestParseSyncMetricsHostile(t *testing.T) {
	good, err := os.ReadFile("testdata/metrics-sync.txt")
	if err != nil {
		t.Fatal(err)
	}
	var many strings.Builder // 4 MiB of an unwanted family
	for i := 0; many.Len() < 4<<20; i++ {
		fmt.Fprintf(&many, "rest_client_requests_total{code=\"200\",host=\"h%d\",method=\"GET\"} %d\n", i, i)
	}
	tests := []struct {
		name    string
		body    string
		wantErr error // nil: the sync metrics are read
	}{
		{name: "20,000 labels on a family not read", body: "other_metric" + labels(20000) + " 1\n" + string(good)},
		{name: "20,000 labels on a family read", body: string(good) + metricLastSync + labels(20000) + " 1\n", wantErr: ErrMetricsBounds},
		{name: "200,000 labels on a family not read: a long line skipped", body: "other_metric" + labels(200000) + " 1\n" + string(good)},
		{name: "200,000 labels on a family read: a line past 64 KiB", body: string(good) + metricLastQueued + labels(200000) + " 1\n", wantErr: ErrMetricsBounds},
		{name: "4 MiB of another family", body: many.String() + string(good)},
		{name: "100,000 samples of a family read", body: strings.Repeat(metricLastSync+"{ip_family=\"IPv4\"} 1\n", 100000), wantErr: ErrMetricsBounds},
		{name: "33 labels on a family read", body: metricLastSync + labels(33) + " 1\n", wantErr: ErrMetricsBounds},
		{name: "32 labels on a family read", body: metricLastSync + labels(32) + " 1\n"},
		{name: "quoted braces and equals signs do not count", body: metricLastSync + `{ip_family="IPv4",x="a=b}c=\"d"} 1` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			m, err := ParseSyncMetrics(strings.NewReader(tt.body))
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s", d)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Families) == 0 {
				t.Errorf("no family read: %+v", m)
			}
		})
	}
}

// TestParseSyncMetricsFilters: the families read are the same as when the
// whole body is parsed, with other families, comments and histograms
// around them.
func TestParseSyncMetricsFilters(t *testing.T) {
	good, err := os.ReadFile("testdata/metrics-sync.txt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseSyncMetrics(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	body := "# a comment\n# TYPE x_seconds histogram\nx_seconds_bucket{le=\"1\"} 1\nx_seconds_bucket{le=\"+Inf\"} 1\nx_seconds_sum 1\nx_seconds_count 1\n" +
		string(good) + "# HELP y unrelated\ny 2\n"
	got, err := ParseSyncMetrics(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	mfs, err := ReadFamilies(context.Background(), strings.NewReader(body), []string{"x_seconds"})
	if err != nil || mfs["x_seconds"] == nil || len(mfs["x_seconds"].GetMetric()) != 1 || len(mfs) != 1 {
		t.Errorf("a histogram family: %v, %v", mfs, err)
	}
}

// TestParseSyncMetricsStopsWithContext: an ended context stops the scan.
func TestParseSyncMetricsStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := strings.Repeat("other 1\n", 10000)
	if _, err := ParseSyncMetricsContext(ctx, strings.NewReader(body)); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// TestMetricsBodyCap: a /metrics body past 4 MiB is refused unread.
func TestMetricsBodyCap(t *testing.T) {
	kp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x 1\n"), (16<<20+700<<10)/4))
	}))
	defer kp.Close()
	c := NewClient(strings.TrimPrefix(kp.URL, "http://"), 10*time.Second)
	if _, err := c.Metrics(context.Background()); !errors.Is(err, ErrTooLarge) {
		t.Errorf("16.7 MB /metrics: %v, want ErrTooLarge", err)
	}
}

// BenchmarkParseSyncMetricsHostile: the sync metrics read from bodies
// built against the exposition parser (go test -bench ParseSyncMetrics
// -benchmem).
func BenchmarkParseSyncMetricsHostile(b *testing.B) {
	good, err := os.ReadFile("testdata/metrics-sync.txt")
	if err != nil {
		b.Fatal(err)
	}
	var many strings.Builder
	for i := 0; many.Len() < 4<<20; i++ {
		fmt.Fprintf(&many, "rest_client_requests_total{code=\"200\",host=\"h%d\",method=\"GET\"} %d\n", i, i)
	}
	for _, bc := range []struct{ name, body string }{
		{"kube-proxy", string(good)},
		{"20000-labels-series", "other_metric" + labels(20000) + " 1\n" + string(good)},
		{"4MiB-other-families", many.String() + string(good)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for range b.N {
				if _, err := ParseSyncMetrics(strings.NewReader(bc.body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fakeLoader struct {
	fail  map[string]bool
	calls [][]string
}

func (f *fakeLoader) Load(_ context.Context, names []string) ([]string, error) {
	f.calls = append(f.calls, names)
	var out []string
	var errs []error
	for _, n := range names {
		if f.fail[n] {
			errs = append(errs, errors.New(n+": not found"))
			continue
		}
		out = append(out, n)
	}
	return out, errors.Join(errs...)
}

func TestCountingLoader(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeLoader{fail: map[string]bool{"ip_vs_nosuch": true}}
	l := CountingLoader{Loader: fake, Metrics: m}
	got, err := l.Load(context.Background(), []string{"ip_vs", "ip_vs_nosuch", "ip_vs_lc"})
	if err == nil || !strings.Contains(err.Error(), "ip_vs_nosuch: not found") {
		t.Errorf("error %v does not carry the failing module's error", err)
	}
	if diff := cmp.Diff([]string{"ip_vs", "ip_vs_lc"}, got); diff != "" {
		t.Errorf("inserted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"ip_vs"}, {"ip_vs_nosuch"}, {"ip_vs_lc"}}, fake.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	want := `
# HELP ipvs_guard_modules_load_attempts_total Number of kernel module load attempts by remediation, by module and result (success or failure).
# TYPE ipvs_guard_modules_load_attempts_total counter
ipvs_guard_modules_load_attempts_total{module="ip_vs",result="success"} 1
ipvs_guard_modules_load_attempts_total{module="ip_vs_lc",result="success"} 1
ipvs_guard_modules_load_attempts_total{module="ip_vs_nosuch",result="failure"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ipvs_guard_modules_load_attempts_total"); err != nil {
		t.Error(err)
	}
}

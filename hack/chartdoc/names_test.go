// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/metrics"
)

// TestDashboardAndAlertsUseRealMetrics fails when the dashboard or an alert
// queries an ipvs_guard_ metric the agent does not expose (a rename would
// otherwise leave a silent, never-firing alert or an empty panel).
func TestDashboardAndAlertsUseRealMetrics(t *testing.T) {
	fams, err := metrics.Describe()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range fams {
		known[f.Name] = true
		if f.Type == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[f.Name+s] = true
			}
		}
	}
	name := regexp.MustCompile(`ipvs_guard_[a-z0-9_]+`)
	for _, file := range []string{"files/dashboard.json", "files/alerts.yaml"} {
		raw, err := os.ReadFile(filepath.Join(chartDir, file))
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, m := range name.FindAllString(string(raw), -1) {
			used[m] = true
		}
		if len(used) < 5 {
			t.Errorf("%s uses only %d ipvs_guard_ metrics", file, len(used))
		}
		var unknown []string
		for m := range used {
			if !known[m] {
				unknown = append(unknown, m)
			}
		}
		sort.Strings(unknown)
		if len(unknown) > 0 {
			t.Errorf("%s queries metrics the agent does not expose: %v", file, unknown)
		}
	}
}

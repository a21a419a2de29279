// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDescribeListsEverything makes sure the documentation sample exercises
// every metric: each collector description and each activity metric.
func TestDescribeListsEverything(t *testing.T) {
	fams, err := Describe()
	if err != nil {
		t.Fatal(err)
	}
	descs := make(chan *prometheus.Desc, 64)
	NewCollector(func() Snapshot { return Snapshot{} }).Describe(descs)
	close(descs)
	want := len(descs) + 4 // + reconcile duration, module loads, ARP probe duration, failover
	if len(fams) != want {
		t.Errorf("Describe listed %d metrics, want %d: a metric has no documentation sample", len(fams), want)
	}
	for _, f := range fams {
		if f.Help == "" || f.Type == "" {
			t.Errorf("%s: empty help or type", f.Name)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// TestLoopPublishesDownMACs checks that the MACs of down interfaces go to
// their own annotation, beside the unchanged MACs annotation.
func TestLoopPublishesDownMACs(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	arp := &scriptedCheck{name: check.NameARP, seq: []scripted{{status: check.StatusSkipped}}}
	pub := &recordingPublisher{}
	startLoop(t, Config{NodeName: "n", Checkers: []check.Checker{arp}, Publisher: pub, Clock: clk, ResyncPeriod: time.Minute,
		MACs:     func() (map[string]string, error) { return map[string]string{"eth0": "02:00:00:00:00:01"}, nil },
		DownMACs: func() (map[string]string, error) { return map[string]string{"eth1": "02:00:00:00:00:02"}, nil }})
	waitUntil(t, "both MAC annotations", func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return pub.annotations[nodestatus.MACsAnnotation] == `{"eth0":"02:00:00:00:00:01"}` &&
			pub.annotations[nodestatus.DownMACsAnnotation] == `{"eth1":"02:00:00:00:00:02"}`
	})
}

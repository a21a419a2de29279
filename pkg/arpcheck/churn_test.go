// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestMessageIgnoresOtherIPs: the IPs a node probes come and go with
// LoadBalancer Services, so the healthy message must not depend on them, and
// a problem message only on the failing IPs (each is probed by a few nodes
// only, so its writes stay bounded per IP, not per cluster).
func TestMessageIgnoresOtherIPs(t *testing.T) {
	macA := mustMAC(t, "52:54:00:00:00:0a")
	hosts := []*responder{{mac: macA, ips: []netip.Addr{ip("10.0.0.10"), ip("10.0.0.12"), ip("10.0.0.13")}}}
	routes := map[string]Route{"eth0": {Interface: "eth0", Index: 2, MAC: proberMAC, Src: proberIP}}
	tests := []struct {
		name    string
		targets [][]string
		want    check.Status
	}{
		{name: "all answered", want: check.StatusOK,
			targets: [][]string{{"10.0.0.10"}, {"10.0.0.10", "10.0.0.13"}, {"10.0.0.12", "10.0.0.13"}}},
		{name: "one silent IP among others", want: check.StatusProblem,
			targets: [][]string{{"10.0.0.11"}, {"10.0.0.10", "10.0.0.11"}, {"10.0.0.11", "10.0.0.12", "10.0.0.13"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []string
			for _, ips := range tc.targets {
				var targets []Target
				for _, s := range ips {
					targets = append(targets, Target{IP: ip(s)})
				}
				c, err := NewChecker(CheckerOptions{
					Targets:   StaticTargets(targets...),
					Network:   &fakeNetwork{routes: routes, first: "eth0", hosts: hosts, t: t},
					Probe:     ProbeOptions{Window: 50 * time.Millisecond, Attempts: 2, Limiter: rate.NewLimiter(rate.Inf, 1)},
					Directory: &fakeDirectory{},
				})
				if err != nil {
					t.Fatal(err)
				}
				res, err := c.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != tc.want || len(res.Findings) != len(ips) {
					t.Fatalf("%v: %s/%s with %d findings: %s", ips, res.Status, res.Reason, len(res.Findings), res.Message)
				}
				msgs = append(msgs, res.Reason+": "+res.Message)
			}
			for _, m := range msgs[1:] {
				if diff := cmp.Diff(msgs[0], m); diff != "" {
					t.Errorf("message changes with the other IPs probed (-fewest +more):\n%s", diff)
				}
			}
		})
	}
}

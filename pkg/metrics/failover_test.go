// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestFailoverHistogram checks that a failover in an ARP finding is
// observed once per run that saw it, by family, and a finding without one
// is not.
func TestFailoverHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	res := check.Result{Name: check.NameARP, Findings: []check.Finding{
		arpcheck.Finding{IP: "192.0.2.10", Family: arpcheck.FamilyIPv4, Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:0b"},
			Failover: &arpcheck.Failover{FromMAC: "02:00:00:00:00:0a", ToMAC: "02:00:00:00:00:0b", UnansweredSeconds: 12}},
		arpcheck.Finding{IP: "192.0.2.11", Family: arpcheck.FamilyIPv4, Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:0b"}},
		arpcheck.Finding{IP: "2001:db8::1", Family: arpcheck.FamilyIPv6, Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:0b"},
			Failover: &arpcheck.Failover{FromMAC: "02:00:00:00:00:0a", ToMAC: "02:00:00:00:00:0b"}},
	}}
	m.ObserveCheck(res, nil, 0)
	want := `
# HELP ipvs_guard_arp_failover_seconds How long a LoadBalancer IP this node probes went unanswered when the MAC answering for it changed (0: no probe went unanswered), by family; its count is the number of such changes. Estimated from the check's probes, to within half the time between two probes.
# TYPE ipvs_guard_arp_failover_seconds histogram
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="0"} 0
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="0.5"} 0
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="1"} 0
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="2"} 0
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="5"} 0
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="10"} 0
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="15"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="20"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="30"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="60"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="120"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="300"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="600"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv4",le="+Inf"} 1
ipvs_guard_arp_failover_seconds_sum{family="ipv4"} 12
ipvs_guard_arp_failover_seconds_count{family="ipv4"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="0"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="0.5"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="1"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="2"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="5"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="10"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="15"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="20"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="30"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="60"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="120"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="300"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="600"} 1
ipvs_guard_arp_failover_seconds_bucket{family="ipv6",le="+Inf"} 1
ipvs_guard_arp_failover_seconds_sum{family="ipv6"} 0
ipvs_guard_arp_failover_seconds_count{family="ipv6"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ipvs_guard_arp_failover_seconds"); err != nil {
		t.Error(err)
	}
}

// TestAnnouncerChangesGauge checks the per-IP count of changes in the last
// hour, exposed for every IP this node probes.
func TestAnnouncerChangesGauge(t *testing.T) {
	c := NewCollector(func() Snapshot {
		return Snapshot{Results: []check.Result{{Name: check.NameARP, Status: check.StatusOK, Findings: []check.Finding{
			arpcheck.Finding{IP: "192.0.2.10", Family: arpcheck.FamilyIPv4, Interface: "eth0", Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:0b"}, AnnouncerChanges: 4},
			arpcheck.Finding{IP: "192.0.2.11", Family: arpcheck.FamilyIPv4, Interface: "eth0", Result: arpcheck.ResultAnswered, MACs: []string{"02:00:00:00:00:0b"}},
		}}}}
	})
	want := `
# HELP ipvs_guard_arp_announcer_changes_last_hour Number of times the MAC answering for a LoadBalancer IP this node probes changed in the last hour (a failover each, or a flap). Like the other per-IP series it covers only the IPs sharded to this node.
# TYPE ipvs_guard_arp_announcer_changes_last_hour gauge
ipvs_guard_arp_announcer_changes_last_hour{family="ipv4",interface="eth0",ip="192.0.2.10"} 4
ipvs_guard_arp_announcer_changes_last_hour{family="ipv4",interface="eth0",ip="192.0.2.11"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ipvs_guard_arp_announcer_changes_last_hour"); err != nil {
		t.Error(err)
	}
}

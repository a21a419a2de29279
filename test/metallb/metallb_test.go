// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
)

// wantProbers is how many agents probe each IP: shard.DefaultK, with more
// Ready nodes than that besides the announcer.
const wantProbers = shard.DefaultK

// waitLong bounds each wait for MetalLB or an agent to react.
const waitLong = 90 * time.Second

// alertFor is the test-time rewrite of every rule's `for:` (the chart ships
// 2m-30m); Prometheus scrapes and evaluates every second.
const alertFor = 5 * time.Second

// TestMetalLBSegment runs the scenarios in order on one segment: nodes a, b
// and c run a speaker, node d and the QEMU guest (real kernel and
// kube-proxy) run none; every node runs an agent;
// Prometheus scrapes the agents and fires into Alertmanager and a webhook.
func TestMetalLBSegment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newClusterGuest(t, ctx, []string{"a", "b", "c", "d"}, []string{"a", "b", "c"}, true)
	c.startAlerting(alertFor)

	ip := c.service("web", corev1.ServiceExternalTrafficPolicyCluster, "a")
	announcer := c.waitAnnouncer("web", "")
	t.Logf("MetalLB assigned %s to default/web; ServiceL2Status names node %s (MAC %s)", ip, announcer, c.mac(announcer))

	t.Run("announced by one speaker", func(t *testing.T) {
		c.expectAnswered(t, ip, announcer)
	})
	t.Run("strictARP off on the guest (real kube-proxy and kernel): conflict names the guest", func(t *testing.T) {
		c.guestStrictARPOff(t, ip, announcer)
	})
	t.Run("strictARP off on the IPVS nodes: conflict, each MAC named", func(t *testing.T) {
		c.strictARPOff(t, ip, announcer)
	})
	t.Run("a foreign host claims the IP: conflict", func(t *testing.T) {
		c.foreignHost(t, ip, announcer)
	})
	t.Run("announcing speaker SIGKILLed: failover", func(t *testing.T) {
		announcer = c.failover(t, ip, announcer)
	})
	t.Run("L2Advertisement excludes the election winner", func(t *testing.T) {
		c.advertisementExcludes(t, ip)
	})
	t.Run("externalTrafficPolicy Local, endpoints on a node without a speaker", func(t *testing.T) {
		c.localWithoutSpeaker(t)
	})
	t.Run("an IPVS module missing: modules alert", func(t *testing.T) {
		c.moduleMissing(t, "d", "ip_vs_sh")
	})
	c.printFigures()
}

// probers returns the nodes whose agent publishes an ARP result for ip.
func (c *cluster) probers(ip netip.Addr) []string {
	var out []string
	for _, n := range c.order {
		if c.arpResult(n, ip) != "" {
			out = append(out, n)
		}
	}
	return out
}

// shardProbers returns the nodes that must probe ip while announcer
// announces it ("" when no node does), in c.order: rendezvous hashing over
// every node (each runs an agent and publishes its MACs), the announcer
// excluded, as every agent computes it from its own view.
func (c *cluster) shardProbers(ip netip.Addr, announcer string) []string {
	want := shard.Probers(ip, c.order, wantProbers, announcer)
	var out []string
	for _, n := range c.order {
		if slices.Contains(want, n) {
			out = append(out, n)
		}
	}
	return out
}

// waitProbers waits until exactly the nodes shardProbers names publish a
// result for ip, and returns them. The set follows the announcer: while
// MetalLB moves or withdraws an IP, each agent recomputes its share from
// the ServiceL2Status it sees, so a set read before every agent has seen the
// change is stale.
func (c *cluster) waitProbers(ip netip.Addr, announcer string) []string {
	c.t.Helper()
	want := c.shardProbers(ip, announcer)
	c.waitFor(fmt.Sprintf("exactly %v probe %s (announcer %q)", want, ip, announcer), waitLong, func() (bool, string) {
		got := c.probers(ip)
		return slices.Equal(got, want), fmt.Sprintf("probed by %v", got)
	})
	return want
}

// expectAnswered waits until exactly the agents the sharding names for ip
// (never the announcer) probe it and report it answered, the condition
// LoadBalancerARPFailing is False on those nodes, and arping from each of
// them at the same moment sees exactly the announcer's MAC.
func (c *cluster) expectAnswered(t *testing.T, ip netip.Addr, announcer string) {
	t.Helper()
	probers := c.shardProbers(ip, announcer)
	if len(probers) < wantProbers || slices.Contains(probers, announcer) {
		t.Fatalf("sharding %s over %v names probers %v, want %d besides the announcer %s", ip, c.order, probers, wantProbers, announcer)
	}
	c.waitFor(fmt.Sprintf("%v probe %s and find it answered", probers, ip), waitLong, func() (bool, string) {
		if got := c.probers(ip); !slices.Equal(got, probers) {
			return false, fmt.Sprintf("probed by %v, want %v (announcer %s)", got, probers, announcer)
		}
		for _, n := range probers {
			if r := c.arpResult(n, ip); r != "answered" {
				return false, fmt.Sprintf("node %s: %s", n, r)
			}
			if cond := c.condition(n, "LoadBalancerARPFailing"); cond.Status != corev1.ConditionFalse {
				return false, fmt.Sprintf("node %s: LoadBalancerARPFailing=%s %s", n, cond.Status, cond.Message)
			}
		}
		return true, ""
	})
	for _, n := range probers {
		r, err := c.arping(n, ip, 100, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{c.mac(announcer)}, r.MACs); diff != "" {
			t.Errorf("arping from %s (-announcer's MAC +seen):\n%s\n%s", n, diff, r.Output)
		}
	}
	t.Logf("%s: probed by %v, each agent and arping see only %s (%s), as ServiceL2Status says", ip, probers, c.mac(announcer), announcer)
}

// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestMetalLBDemo is the last part of `make demo`: the real MetalLB on the
// segment, then another node's kernel answering for the LoadBalancer IP
// (strictARP off there), found and named by the agents.
func TestMetalLBDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	say := func(format string, args ...any) { fmt.Fprintf(os.Stdout, "    "+format+"\n", args...) }
	start := time.Now()
	fmt.Fprintln(os.Stdout, "\n== MetalLB on a layer-2 segment: three nodes (network namespaces on one bridge), each with a MetalLB speaker and an ipvs-guard agent")
	c := newCluster(t, ctx, []string{"a", "b", "c"}, []string{"a", "b", "c"})
	for _, n := range c.order {
		say("node %s: %s, MAC %s", n, c.ip(n), c.mac(n))
	}
	ip := c.service("web", corev1.ServiceExternalTrafficPolicyCluster, "a")
	announcer := c.waitAnnouncer("web", "")
	say("MetalLB's controller assigned %s to default/web; its speaker on %s announces it (ServiceL2Status)", ip, announcer)
	c.expectAnswered(t, ip, announcer)
	probers := c.shardProbers(ip, announcer)
	say("agents probing it (%v) see exactly one MAC, %s's: LoadBalancerARPFailing=False", probers, announcer)

	culprit := probers[0]
	victim := probers[len(probers)-1]
	fmt.Fprintf(os.Stdout, "\n== strictARP turned off on node %s (arp_ignore=0): its kernel answers for the IP on its kube-ipvs0 too\n", culprit)
	fault := time.Now()
	if err := c.setStrictARP(culprit, false); err != nil {
		t.Fatal(err)
	}
	named := func(p string) []string {
		if p == culprit {
			return []string{c.mac(announcer) + " (" + announcer + ")"}
		}
		return []string{c.mac(announcer) + " (" + announcer + ")", c.mac(culprit) + " (" + culprit + ")"}
	}
	d := c.expectFailing([]string{victim}, "ARPConflict", named, fault)
	cond := c.condition(victim, "LoadBalancerARPFailing")
	say("after %.1fs, node %s: LoadBalancerARPFailing=True %s", d.Seconds(), victim, cond.Reason)
	say("  %s", cond.Message)
	r, err := c.arping(victim, ip, 100, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	say("arping from %s at the same moment: %s", victim, strings.Join(r.MACs, ", "))
	sd := c.condition(culprit, "StrictARPDisabled")
	say("node %s: StrictARPDisabled=%s %s", culprit, sd.Status, sd.Reason)
	if err := c.setStrictARP(culprit, true); err != nil {
		t.Fatal(err)
	}
	c.expectAnswered(t, ip, announcer)
	say("strictARP back on: the agents see %s alone again (demo part took %.0fs)", c.mac(announcer), time.Since(start).Seconds())
}

// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
)

// BenchmarkMetalLBSpeakerRTT measures the ARP round trip to MetalLB's
// user-space responder (the speaker announcing a LoadBalancer IP) from
// another node, 100 probes each with ipvs-guard's Prober and with iputils
// arping (its printed RTT, corrected for its 0.5 ms print offset), and
// reports both medians and their ratio.
func BenchmarkMetalLBSpeakerRTT(b *testing.B) {
	const n = 100
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := newCluster(b, ctx, []string{"a", "b"}, []string{"a", "b"})
	ip := c.service("web", corev1.ServiceExternalTrafficPolicyCluster, "a")
	announcer := c.waitAnnouncer("web", "")
	prober := c.otherNodes(announcer)[0]
	want := c.nodes[announcer].MAC

	hn := arpcheck.HostNetwork{NetNSPath: "/var/run/netns/" + c.nodes[prober].NetNS}
	rt, err := hn.Route(ctx, ip, "")
	if err != nil {
		b.Fatal(err)
	}
	sock, dst, err := hn.Listen(ctx, rt)
	if err != nil {
		b.Fatal(err)
	}
	defer sock.Close()
	p, err := arpcheck.NewProber(sock, dst, rt.Interface, rt.MAC, rt.Src, arpcheck.ProbeOptions{Window: 250 * time.Millisecond, Attempts: 1})
	if err != nil {
		b.Fatal(err)
	}
	// Warm up: the speaker answers once it has announced.
	c.waitFor("the speaker answers "+ip.String(), waitLong, func() (bool, string) {
		obs, err := p.Probe(ctx, []netip.Addr{ip})
		return err == nil && len(obs[0].MACs) == 1 && obs[0].MACs[0].String() == want, "no answer yet"
	})
	// A reply the busy user-space speaker sends after the window (or one
	// arping does not print within its second) is a miss, counted and
	// reported; the medians are over the answered probes. More than
	// maxMisses on either side fails the benchmark.
	const maxMisses = n / 10
	var ours, theirs []time.Duration
	var ourMisses, theirMisses int
	for b.Loop() {
		ours, theirs = ours[:0], theirs[:0]
		ourMisses, theirMisses = 0, 0
		for range n {
			obs, err := p.Probe(ctx, []netip.Addr{ip})
			if err != nil {
				b.Fatalf("probe: %v", err)
			}
			if len(obs[0].MACs) == 1 {
				ours = append(ours, obs[0].RTT)
			} else {
				ourMisses++
			}
			r, err := c.nodes[prober].Arping(ctx, ip, 1, time.Second)
			if err != nil {
				b.Fatalf("arping: %v\n%s", err, r.Output)
			}
			if len(r.RTTs) == 1 {
				theirs = append(theirs, r.RTTs[0])
			} else {
				theirMisses++
			}
		}
	}
	if ourMisses > maxMisses || theirMisses > maxMisses {
		b.Fatalf("of %d probes, ipvs-guard missed %d and arping %d replies (at most %d each)", n, ourMisses, theirMisses, maxMisses)
	}
	b.ReportMetric(float64(ourMisses), "ipvsguard-misses")
	b.ReportMetric(float64(theirMisses), "arping-misses")
	mo, mt := median(ours), median(theirs)
	b.ReportMetric(float64(mo.Microseconds()), "ipvsguard-median-rtt-us")
	b.ReportMetric(float64(mt.Microseconds()), "arping-median-rtt-us")
	b.ReportMetric(float64(mo)/float64(mt), "rtt-ratio")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

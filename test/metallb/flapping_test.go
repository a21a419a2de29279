// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
)

// agentFailover is one failover an agent observed: its histogram's count
// grew, and the sum by the seconds unanswered.
type agentFailover struct {
	at      time.Time
	node    string
	seconds float64
}

// arpingMove is a change of the MAC answering arping.
type arpingMove struct {
	from, to       string
	lastOld, newAt time.Time
	gap            time.Duration
}

// TestMetalLBFlapping SIGKILLs the announcing speaker again and again, each
// time starting it again once another speaker took the IP over (as the
// DaemonSet would restart it): MetalLB's election gives the IP back to it,
// so every kill moves the IP twice. arping from d (no speaker) probes the IP
// all along; the agents' failover histograms and announcer-change gauges
// are read from their /metrics every 200 ms. Each move's unanswered time, as
// the agents measure it, is compared with the gap arping saw, and the
// fourth move must make the IP flap (gauge, then
// IPVSGuardLoadBalancerIPFlapping through Prometheus and Alertmanager).
func TestMetalLBFlapping(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, []string{"a", "b", "c", "d"}, []string{"a", "b", "c"})
	c.startAlerting(alertFor)
	ip := c.service("web", corev1.ServiceExternalTrafficPolicyCluster, "a")
	announcer := c.waitStableAnnouncer("web")
	c.expectAnswered(t, ip, announcer)

	const observer = "d" // no speaker: never the announcer, hears every reply
	stop := make(chan struct{})
	var mu sync.Mutex
	var failovers []agentFailover
	var arpings []struct {
		at   time.Time
		macs []string
	}
	flapAt := map[string]time.Time{} // node → first scrape with more than FlapThreshold changes
	// timeline is what each agent published about the IP, as it changed.
	var timeline []string
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		t.Logf("what the agents published about %s:\n%s", ip, strings.Join(timeline, "\n"))
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the agents' histograms and gauges
		defer wg.Done()
		type seen struct{ count, sum float64 }
		last := map[string]seen{}
		published := map[string]string{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, n := range c.order {
				mfs, err := c.scrape(n)
				if err != nil {
					continue
				}
				var now seen
				for _, m := range mfs["ipvs_guard_arp_failover_seconds"].GetMetric() {
					now.count += float64(m.GetHistogram().GetSampleCount())
					now.sum += m.GetHistogram().GetSampleSum()
				}
				mu.Lock()
				if prev, ok := last[n]; ok && now.count > prev.count {
					// One failover per scrape at most (the IP moves every few
					// seconds at best, the agent probes every second).
					failovers = append(failovers, agentFailover{at: time.Now(), node: n, seconds: (now.sum - prev.sum) / (now.count - prev.count)})
				}
				last[n] = now
				state := ""
				for _, m := range mfs["ipvs_guard_arp_probe_result"].GetMetric() {
					lbl := map[string]string{}
					for _, l := range m.GetLabel() {
						lbl[l.GetName()] = l.GetValue()
					}
					if lbl["ip"] == ip.String() && m.GetGauge().GetValue() == 1 {
						state = lbl["result"]
					}
				}
				for _, m := range mfs["ipvs_guard_arp_announcer_changes_last_hour"].GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "ip" && l.GetValue() == ip.String() {
							state += fmt.Sprintf(" changes=%v", m.GetGauge().GetValue())
						}
					}
				}
				state += fmt.Sprintf(" failovers=%v (%.1fs)", now.count, now.sum)
				if published[n] != state {
					published[n] = state
					timeline = append(timeline, time.Now().Format("15:04:05.000")+" "+n+": "+state)
				}
				for _, m := range mfs["ipvs_guard_arp_announcer_changes_last_hour"].GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "ip" && l.GetValue() == ip.String() && m.GetGauge().GetValue() > arpcheck.FlapThreshold && flapAt[n].IsZero() {
							flapAt[n] = time.Now()
						}
					}
				}
				mu.Unlock()
			}
		}
	}()
	go func() { // arping, one request at a time
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := c.arping(observer, ip, 1, time.Second)
			if err == nil {
				mu.Lock()
				arpings = append(arpings, struct {
					at   time.Time
					macs []string
				}{time.Now(), r.MACs})
				mu.Unlock()
			}
			if err == nil && len(r.MACs) > 0 {
				time.Sleep(100 * time.Millisecond) // answered at once: pace it
			}
		}
	}()

	// arpingMoves counts the changes of the single MAC arping saw.
	arpingMoves := func() int {
		mu.Lock()
		defer mu.Unlock()
		n, prev := 0, ""
		for _, a := range arpings {
			if len(a.macs) == 1 && prev != "" && a.macs[0] != prev {
				n++
			}
			if len(a.macs) == 1 {
				prev = a.macs[0]
			}
		}
		return n
	}
	c.waitFor("arping from "+observer+" sees "+announcer+"'s MAC before the first kill", waitLong, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		n := len(arpings)
		return n > 0 && slices.Equal(arpings[n-1].macs, []string{c.mac(announcer)}), "not yet"
	})

	// Each kill moves the IP away and, once the speaker is back, usually
	// back (MetalLB's election prefers the same node again): kill until
	// arping saw more moves than FlapThreshold.
	const maxKills = 4
	start := time.Now()
	kills := 0
	for i := 0; i < maxKills && arpingMoves() <= arpcheck.FlapThreshold; i++ {
		kills++
		old := announcer
		kill := time.Now()
		c.mlb.Speakers[old].Kill()
		t.Logf("kill %d: SIGKILLed the speaker on %s at %s", i+1, old, kill.Format("15:04:05.000"))
		next := c.waitAnnouncer("web", old)
		t.Logf("kill %d: ServiceL2Status names %s after %.1fs", i+1, next, time.Since(kill).Seconds())
		c.waitFor("arping from "+observer+" sees "+next+"'s MAC", waitLong, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			if n := len(arpings); n > 0 && slices.Equal(arpings[n-1].macs, []string{c.mac(next)}) {
				return true, ""
			}
			return false, "not yet"
		})
		if err := c.mlb.StartSpeaker(c.ctx, c.nodes[old]); err != nil {
			t.Fatal(err)
		}
		announcer = c.waitStableAnnouncer("web")
		c.waitFor("arping from "+observer+" sees "+announcer+"'s MAC", waitLong, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			if n := len(arpings); n > 0 && slices.Equal(arpings[n-1].macs, []string{c.mac(announcer)}) {
				return true, ""
			}
			return false, "not yet"
		})
	}
	// The agents publish a move at their next probe (resync) and the
	// flapping gauge with it.
	c.waitFor("an agent reports "+ip.String()+" flapping", waitLong, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(flapAt) > 0, fmt.Sprintf("%d failovers seen by the agents", len(failovers))
	})
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	// arping's moves: a single MAC changing.
	var moves []arpingMove
	var prevMAC string
	var prevAt time.Time
	for _, a := range arpings {
		if len(a.macs) != 1 {
			continue
		}
		if prevMAC != "" && a.macs[0] != prevMAC {
			moves = append(moves, arpingMove{from: prevMAC, to: a.macs[0], lastOld: prevAt, newAt: a.at, gap: a.at.Sub(prevAt)})
		}
		prevMAC, prevAt = a.macs[0], a.at
	}
	if len(moves) <= arpcheck.FlapThreshold || len(moves) > 2*kills {
		t.Fatalf("arping saw %d moves in %d kills, want more than %d and at most two a kill: %+v", len(moves), kills, arpcheck.FlapThreshold, moves)
	}
	// Each agent's failovers go to the moves in order: the next move of
	// that agent's not matched yet whose window holds the report, from a
	// second before arping's first reply of the move (an agent can be
	// ahead: arping waits up to a second for each reply) to a second after
	// the next move's (an agent reports at its next probe). An agent that
	// did not probe the IP for a move skips it.
	perMove := make([][]agentFailover, len(moves))
	next := map[string]int{}
	for _, f := range failovers {
		for i := next[f.node]; i < len(moves); i++ {
			end := time.Now()
			if i+1 < len(moves) {
				end = moves[i+1].newAt.Add(time.Second)
			}
			if f.at.Before(moves[i].newAt.Add(-time.Second)) {
				break // before this move: matches none
			}
			if f.at.Before(end) {
				perMove[i] = append(perMove[i], f)
				next[f.node] = i + 1
				break
			}
		}
	}
	for i, m := range moves {
		var seen []string
		for _, f := range perMove[i] {
			seen = append(seen, fmt.Sprintf("%s %.1fs (reported %.1fs after arping's first reply)", f.node, f.seconds, f.at.Sub(m.newAt).Seconds()))
			// The agent's estimate is off by at most half its 1 s resync at
			// each end, arping's by its 1 s reply deadline, a busy host
			// delays either by a scheduling round.
			if d := math.Abs(f.seconds - m.gap.Seconds()); d > 2.5 {
				t.Errorf("move %d: agent on %s measured %.1fs unanswered, arping's gap %.1fs", i+1, f.node, f.seconds, m.gap.Seconds())
			}
		}
		if len(seen) == 0 {
			t.Errorf("move %d (%s → %s): no agent observed a failover", i+1, m.from, m.to)
		}
		c.figure(fmt.Sprintf("move %d: unanswered, arping from %s", i+1, observer), "%.1fs", m.gap.Seconds())
		c.figure(fmt.Sprintf("move %d: unanswered, ipvs_guard_arp_failover_seconds", i+1), "%s", strings.Join(seen, "; "))
	}
	var first time.Time
	var who string
	for n, at := range flapAt {
		if first.IsZero() || at.Before(first) {
			first, who = at, n
		}
	}
	fourth := moves[arpcheck.FlapThreshold].newAt
	c.figure("4th move (arping) → an agent's gauge says flapping ("+who+")", "%.1fs", first.Sub(fourth).Seconds())
	firing, notified := c.expectAlert("IPVSGuardLoadBalancerIPFlapping", map[string]string{"ip": ip.String()}, fourth)
	c.figure("4th move → IPVSGuardLoadBalancerIPFlapping firing / notified", "%.1fs / %.1fs (for: %s)", firing.Seconds(), notified.Seconds(), alertFor)
	t.Logf("%d kills in %.0fs", kills, time.Since(start).Seconds())
	c.printFigures()
}

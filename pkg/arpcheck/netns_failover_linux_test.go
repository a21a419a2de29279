// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package arpcheck

import (
	"context"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// stamped is something seen at a moment.
type stamped[T any] struct {
	at time.Time
	v  T
}

// arpingStream runs iputils arping on ip until ctx ends and records each
// reply's MAC as it arrives. iputils 20221126 takes whole seconds between
// requests and as the reply deadline, so loops of single-request runs
// (each ends at its reply, or after a second of silence), started every
// interval/loops apart, sample a silence every interval/loops.
func arpingStream(ctx context.Context, t *testing.T, ns, iface, ip string, interval time.Duration) (replies func() []stamped[string]) {
	t.Helper()
	const loops = 4
	var mu sync.Mutex
	var got []stamped[string]
	var wg sync.WaitGroup
	for i := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i) * interval / loops):
			}
			for ctx.Err() == nil {
				out, _ := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "arping", "-b", "-c", "1", "-w", "1", "-I", iface, ip).Output()
				if m := unicastReply.FindStringSubmatch(string(out)); m != nil {
					mu.Lock()
					got = append(got, stamped[string]{time.Now(), strings.ToLower(m[2])})
					mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(interval):
					}
				}
			}
		}()
	}
	t.Cleanup(wg.Wait)
	return func() []stamped[string] {
		mu.Lock()
		defer mu.Unlock()
		out := append([]stamped[string](nil), got...)
		slices.SortFunc(out, func(a, b stamped[string]) int { return a.at.Compare(b.at) })
		return out
	}
}

// arpingGap is the time between the last reply from one MAC and the first
// from another after moment from: the gap arping saw at a move.
func arpingGap(replies []stamped[string], from time.Time) time.Duration {
	var last stamped[string]
	for _, r := range replies {
		if r.at.Before(from) {
			last = r
			continue
		}
		if last.v != "" && r.v != last.v {
			return r.at.Sub(last.at)
		}
		last = r
	}
	return -1
}

// TestNetNSFailoverAndFlapping moves a VIP between two nodes while the
// check runs every few hundred milliseconds, as the agent does every
// resync, and iputils arping probes it every 100 ms at the same time: the
// first move leaves it silent for a while, the next three are immediate.
// The failover seconds the check measures must agree with arping's gap (to
// within the time between two runs), every move must count once, and the
// fourth move in the hour must make the IP flap.
func TestNetNSFailoverAndFlapping(t *testing.T) {
	requireNetNS(t)
	tp := newTopo(t)
	br := tp.ns("br")
	tp.bridge(br, "br0")
	prober := tp.ns("prober")
	n1, n2 := tp.ns("node1"), tp.ns("node2")
	tp.plug(br, "br0", "p0", prober, "eth0", "10.77.4.1/24")
	mac1 := tp.plug(br, "br0", "n1", n1, "eth0", "10.77.4.11/24")
	mac2 := tp.plug(br, "br0", "n2", n2, "eth0", "10.77.4.12/24")
	const vip = "10.77.4.50"
	tp.run("ip", "-n", n1, "addr", "add", vip+"/32", "dev", "eth0")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const arpingInterval = 100 * time.Millisecond
	replies := arpingStream(ctx, t, prober, "eth0", vip, arpingInterval)

	c, err := NewChecker(CheckerOptions{
		Targets: StaticTargets(Target{IP: netip.MustParseAddr(vip)}),
		Network: HostNetwork{NetNSPath: netnsPath(prober)},
		Probe:   ProbeOptions{Window: 200 * time.Millisecond, Attempts: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	const resync = 300 * time.Millisecond
	var mu sync.Mutex
	var findings []stamped[Finding]
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		tick := time.NewTicker(resync)
		defer tick.Stop()
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			res, err := c.Run(rctx)
			rcancel()
			if err == nil && len(res.Findings) == 1 {
				mu.Lock()
				findings = append(findings, stamped[Finding]{time.Now(), res.Findings[0].(Finding)})
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()

	move := func(from, to string, silent time.Duration) time.Time {
		at := time.Now()
		tp.run("ip", "-n", from, "addr", "del", vip+"/32", "dev", "eth0")
		time.Sleep(silent)
		tp.run("ip", "-n", to, "addr", "add", vip+"/32", "dev", "eth0")
		return at
	}
	const silent = 3 * time.Second
	time.Sleep(1500 * time.Millisecond)
	moves := []time.Time{move(n1, n2, silent)}
	for _, m := range [][2]string{{n2, n1}, {n1, n2}, {n2, n1}} {
		time.Sleep(1500 * time.Millisecond)
		moves = append(moves, move(m[0], m[1], 0))
	}
	time.Sleep(1500 * time.Millisecond)
	cancel()
	<-loopDone

	mu.Lock()
	defer mu.Unlock()
	var failovers []stamped[Failover]
	flapAt := time.Time{}
	for _, f := range findings {
		if f.v.Failover != nil {
			failovers = append(failovers, stamped[Failover]{f.at, *f.v.Failover})
		}
		if flapAt.IsZero() && f.v.AnnouncerChanges > FlapThreshold {
			flapAt = f.at
		}
	}
	if len(failovers) != len(moves) {
		t.Fatalf("the check saw %d failovers, want %d (one per move): %+v", len(failovers), len(moves), failovers)
	}
	wantMACs := [][2]string{{mac1, mac2}, {mac2, mac1}, {mac1, mac2}, {mac2, mac1}}
	all := replies()
	t.Logf("arping: %d replies", len(all))
	for i, fo := range failovers {
		if fo.v.FromMAC != wantMACs[i][0] || fo.v.ToMAC != wantMACs[i][1] {
			t.Errorf("move %d: %s → %s, want %s → %s", i+1, fo.v.FromMAC, fo.v.ToMAC, wantMACs[i][0], wantMACs[i][1])
		}
		gap := arpingGap(all, moves[i].Add(-arpingInterval))
		got := time.Duration(fo.v.UnansweredSeconds * float64(time.Second))
		t.Logf("move %d: ipvs-guard %v unanswered (seen %v after the move), arping's gap %v (a request every %v when answered, a silence sampled every %v)",
			i+1, got.Round(time.Millisecond), fo.at.Sub(moves[i]).Round(time.Millisecond), gap.Round(time.Millisecond), arpingInterval, time.Second/4)
		if gap < 0 {
			t.Errorf("move %d: arping saw no change of MAC", i+1)
			continue
		}
		// The check runs every resync plus a probe window; its estimate is
		// off by at most half a period at each end, arping's by an interval.
		if tol := resync + 2*200*time.Millisecond + arpingInterval; got < gap-tol || got > gap+tol {
			t.Errorf("move %d: ipvs-guard measured %v unanswered, arping %v (tolerance %v)", i+1, got, gap, tol)
		}
	}
	if flapAt.IsZero() {
		t.Fatalf("four moves in a minute did not make the IP flap")
	}
	t.Logf("flapping named %v after the 4th move", flapAt.Sub(moves[3]).Round(time.Millisecond))
	if d := flapAt.Sub(moves[3]); d < 0 || d > 2*time.Second {
		t.Errorf("flapping named %v after the 4th move, want within two runs", d)
	}
}

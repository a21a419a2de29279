// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// simSend is one request of a simulated round.
type simSend struct {
	at time.Duration // since the round started
	ip netip.Addr
}

// simRound is what a simulated round did.
type simRound struct {
	sends     []simSend
	perIP     map[netip.Addr][]time.Duration // send offsets per IP
	firstDone time.Duration                  // when the last first request went out
	end       time.Duration                  // when the last window closed
}

// simulate runs a probe round's schedule on a simulated clock, paced by a
// real rate.Limiter driven with explicit times, as Prober.send drives it
// with the wall clock: pick, wait for a token, drop the pick if its IP was
// answered or its window closed meanwhile, send. An IP in answerAfter
// answers every request after that delay; the others never answer. A
// cutoff (since the round started; 0: none) is the schedule's.
func simulate(t *testing.T, n int, answerAfter map[int]time.Duration, window time.Duration, attempts int, lim *rate.Limiter, cutoff time.Duration) simRound {
	t.Helper()
	start := time.Unix(1000, 0)
	now := start
	order := make([]*probeState, n)
	index := map[*probeState]int{}
	for i := range order {
		order[i] = &probeState{ip: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})}
		index[order[i]] = i
	}
	answered := func(st *probeState) bool {
		d, ok := answerAfter[index[st]]
		return ok && len(st.sends) > 0 && !st.sends[0].Add(d).After(now)
	}
	var cut time.Time
	if cutoff > 0 {
		cut = start.Add(cutoff)
	}
	sched := newSchedule(order, window, attempts, cut)
	r := simRound{perIP: map[netip.Addr][]time.Duration{}}
	firstSent := 0
	for steps := 0; ; steps++ {
		if steps > 100*n*attempts+1000 {
			t.Fatal("the schedule does not terminate")
		}
		st, wait, done := sched.next(now, answered)
		if done {
			break
		}
		if st == nil {
			if wait <= 0 {
				t.Fatalf("nothing to send and a wait of %v", wait)
			}
			now = now.Add(wait)
			continue
		}
		res := lim.ReserveN(now, 1)
		if !res.OK() {
			t.Fatal("limiter refuses a single token")
		}
		now = now.Add(res.DelayFrom(now))
		if len(st.sends) > 0 && (answered(st) || !st.deadline(window).After(now)) {
			continue
		}
		if len(st.sends) == 0 && sched.pastCutoff(now) {
			continue
		}
		if len(st.sends) == 0 {
			firstSent++
			if firstSent == n {
				r.firstDone = now.Sub(start)
			}
		}
		st.sends = append(st.sends, now)
		sched.sent(st, now)
		r.sends = append(r.sends, simSend{at: now.Sub(start), ip: st.ip})
		r.perIP[st.ip] = append(r.perIP[st.ip], now.Sub(start))
	}
	r.end = sched.end(order).Sub(start)
	return r
}

// maxInAnySecond is the most requests sent within any 1 s interval: what a
// switch's broadcast storm control measures.
func maxInAnySecond(sends []simSend) int {
	most, j := 0, 0
	for i := range sends {
		for sends[i].at-sends[j].at >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

func TestScheduleRound(t *testing.T) {
	const window = time.Second
	answering := func(n int, rtt time.Duration) map[int]time.Duration {
		m := map[int]time.Duration{}
		for i := range n {
			m[i] = rtt
		}
		return m
	}
	tests := []struct {
		name        string
		n           int
		answer      map[int]time.Duration
		attempts    int
		rate        rate.Limit
		burst       int
		wantFrames  int
		maxEnd      time.Duration // the round's wall time
		maxPerSec   int
		minRetryGap time.Duration // between two requests for one silent IP
	}{
		{
			// The figure of the arp check: 1,000 IPs, 300 answering, default pacing.
			name: "1000 IPs, 300 answering, defaults", n: 1000, answer: answering(300, 200*time.Microsecond),
			attempts: DefaultAttempts, rate: DefaultRate, burst: DefaultBurst,
			wantFrames: 300 + 700*3, maxEnd: 1300 * time.Millisecond,
			maxPerSec: 300 + 700*3, minRetryGap: window / 3,
		},
		{
			name: "one silent IP", n: 1, answer: nil,
			attempts: 3, rate: DefaultRate, burst: DefaultBurst,
			wantFrames: 3, maxEnd: window, maxPerSec: 3, minRetryGap: window / 3,
		},
		{
			name: "every IP answers: no retries", n: 500, answer: answering(500, time.Millisecond),
			attempts: 3, rate: DefaultRate, burst: DefaultBurst,
			wantFrames: 500, maxEnd: window + 200*time.Millisecond, maxPerSec: 500,
		},
		{
			// A slow answer (after the first retry is due) stops the later ones.
			name: "late answer stops retries", n: 10, answer: answering(10, 400*time.Millisecond),
			attempts: 3, rate: DefaultRate, burst: DefaultBurst,
			wantFrames: 20, maxEnd: window + 10*time.Millisecond, maxPerSec: 20, minRetryGap: window / 3,
		},
		{
			// More IPs than one window can start at this rate: every first
			// request still goes out, the limiter is never exceeded, every
			// IP gets a retry before its window closes (at least 2×5,000
			// frames), and the round lasts no longer than sending them plus
			// one window.
			name: "5000 silent IPs at 2000/s", n: 5000, answer: nil,
			attempts: 3, rate: 2000, burst: 128,
			maxEnd: 2*5000*time.Second/2000 + window, maxPerSec: 2000 + 128,
			minRetryGap: window / 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := simulate(t, tt.n, tt.answer, window, tt.attempts, rate.NewLimiter(tt.rate, tt.burst), 0)
			if tt.wantFrames > 0 && len(r.sends) != tt.wantFrames {
				t.Errorf("%d requests sent, want %d", len(r.sends), tt.wantFrames)
			}
			if len(r.perIP) != tt.n {
				t.Errorf("%d IPs got a request, want all %d", len(r.perIP), tt.n)
			}
			if r.end > tt.maxEnd {
				t.Errorf("round ends after %v, want at most %v (first requests done at %v)", r.end, tt.maxEnd, r.firstDone)
			}
			if got := maxInAnySecond(r.sends); got > tt.maxPerSec {
				t.Errorf("%d requests within one second, want at most %d", got, tt.maxPerSec)
			}
			for ip, at := range r.perIP {
				if len(at) > tt.attempts {
					t.Fatalf("%s: %d requests, more than %d attempts", ip, len(at), tt.attempts)
				}
				for i := 1; i < len(at); i++ {
					if gap := at[i] - at[i-1]; gap < tt.minRetryGap {
						t.Fatalf("%s: requests %v apart, want at least %v", ip, gap, tt.minRetryGap)
					}
					if at[i] >= at[0]+window {
						t.Fatalf("%s: request at %v, after its window (first at %v) closed", ip, at[i], at[0])
					}
				}
			}
			t.Logf("%d requests, first requests done at %v, round ends at %v, at most %d in one second",
				len(r.sends), r.firstDone, r.end, maxInAnySecond(r.sends))
		})
	}
}

// TestScheduleRetriesEveryIPWhenTheRoundOutgrowsAWindow: when first requests
// alone take longer than a window, early IPs still get their retries before
// their windows close (a retry about to miss its window jumps the queue).
func TestScheduleRetriesEveryIPWhenTheRoundOutgrowsAWindow(t *testing.T) {
	const n, attempts = 3000, 3
	r := simulate(t, n, nil, time.Second, attempts, rate.NewLimiter(1000, 1), 0)
	short := 0
	for _, at := range r.perIP {
		if len(at) < 2 {
			short++
		}
	}
	if short > 0 {
		t.Errorf("%d of %d silent IPs got no retry within their window", short, n)
	}
	t.Logf("%d requests; first requests done at %v; round ends at %v", len(r.sends), r.firstDone, r.end)
}

// TestScheduleFirstRequestsFirst: with the rate as the only bound, every
// first request goes out before any retry, in input order.
func TestScheduleFirstRequestsFirst(t *testing.T) {
	r := simulate(t, 800, nil, time.Second, 3, rate.NewLimiter(DefaultRate, DefaultBurst), 0)
	for i, s := range r.sends[:800] {
		if want := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}); s.ip != want {
			t.Fatalf("request %d is for %s, want the first request of %s", i, s.ip, want)
		}
	}
	if got := fmt.Sprint(len(r.sends)); got != "2400" {
		t.Errorf("%s requests, want 2400", got)
	}
}

// TestScheduleCutoff: a round too large for the time left sends no first
// request after the cutoff, gives every IP it did start its full window, and
// ends one window after the cutoff at the latest.
func TestScheduleCutoff(t *testing.T) {
	const window = time.Second
	tests := []struct {
		name      string
		n         int
		cutoff    time.Duration
		wantFirst int // IPs probed
	}{
		{name: "no cutoff", n: 3000, cutoff: 0, wantFirst: 3000},
		{name: "cutoff after every first request", n: 1000, cutoff: 10 * time.Second, wantFirst: 1000},
		// 2,000 frames/s with a burst of 512, two thirds of them retries
		// once the first windows start: far fewer than 20,000 IPs start.
		{name: "cutoff mid-round", n: 20000, cutoff: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := simulate(t, tt.n, nil, window, DefaultAttempts, rate.NewLimiter(DefaultRate, DefaultBurst), tt.cutoff)
			first := len(r.perIP)
			if tt.wantFirst > 0 && first != tt.wantFirst {
				t.Errorf("%d IPs probed, want %d", first, tt.wantFirst)
			}
			if tt.wantFirst == 0 && (first == 0 || first >= tt.n) {
				t.Errorf("%d of %d IPs probed: want some, not all", first, tt.n)
			}
			if tt.cutoff > 0 && r.end > tt.cutoff+window {
				t.Errorf("round ends %v after it started, past cutoff + window %v", r.end, tt.cutoff+window)
			}
			for ip, sends := range r.perIP {
				if tt.cutoff > 0 && sends[0] > tt.cutoff {
					t.Errorf("%s first probed at %v, after the cutoff %v", ip, sends[0], tt.cutoff)
				}
				if len(sends) > 1 && sends[len(sends)-1]-sends[0] >= window {
					t.Errorf("%s: retries %v outside its window", ip, sends)
				}
			}
		})
	}
}

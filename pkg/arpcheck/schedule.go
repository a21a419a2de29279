// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"container/heap"
	"time"
)

// schedule decides which request of a probe round goes out next. It is
// pure bookkeeping over explicit times, the same for ARP and NDP, so that
// the prober's pacing is tested on a simulated clock.
//
// Every IP gets its first request as early as the rate limiter allows, in
// input order: an IP's window (Window after its first request) is when its
// replies are collected, so the round lasts about the time to send every
// first request plus one window. An IP still unanswered gets its next
// request Window/Attempts after the previous one, inside its window, which
// is never extended: a retry that cannot go out before its IP's window
// closes is dropped (the first request had the whole window). Due retries
// wait behind first requests, except a retry whose window closes within half
// a retry interval: it goes first, so a round too large to send within a
// window still gives early IPs their retries. With a cutoff, no first
// request goes out after it: the IPs left are not probed in this round, and
// the round still ends one window after the cutoff at the latest.
type schedule struct {
	window   time.Duration
	interval time.Duration // between two requests for one IP
	attempts int
	cutoff   time.Time // no first request after it; zero: none

	pending []*probeState // first requests not sent yet, in input order
	retries retryHeap     // next request of each unanswered IP, by due time
}

func newSchedule(order []*probeState, window time.Duration, attempts int, cutoff time.Time) *schedule {
	return &schedule{
		window:   window,
		interval: window / time.Duration(attempts),
		attempts: attempts,
		cutoff:   cutoff,
		pending:  order,
	}
}

// pastCutoff reports whether first requests may no longer go out at now.
func (s *schedule) pastCutoff(now time.Time) bool {
	return !s.cutoff.IsZero() && now.After(s.cutoff)
}

// next returns the IP whose request should go out at now. When none should,
// it returns nil and either the time to wait before one may be due or done
// (every first request sent and no retry left). answered reports whether an
// IP has been answered already; its retries are then dropped.
func (s *schedule) next(now time.Time, answered func(*probeState) bool) (st *probeState, wait time.Duration, done bool) {
	if s.pastCutoff(now) {
		s.pending = nil
	}
	for len(s.retries) > 0 {
		top := s.retries[0]
		if !top.st.deadline(s.window).After(now) || answered(top.st) {
			heap.Pop(&s.retries)
			continue
		}
		if top.due.After(now) {
			break
		}
		// Due. First requests go first unless this window closes soon.
		if len(s.pending) == 0 || !top.st.deadline(s.window).After(now.Add(s.interval/2)) {
			heap.Pop(&s.retries)
			return top.st, 0, false
		}
		break
	}
	if len(s.pending) > 0 {
		st = s.pending[0]
		s.pending = s.pending[1:]
		return st, 0, false
	}
	if len(s.retries) == 0 {
		return nil, 0, true
	}
	return nil, s.retries[0].due.Sub(now), false
}

// sent records that a request for st went out at t (already appended to
// st.sends by the caller) and schedules its next one, if any.
func (s *schedule) sent(st *probeState, t time.Time) {
	if len(st.sends) < s.attempts {
		heap.Push(&s.retries, retry{due: t.Add(s.interval), st: st})
	}
}

// end is when the last window of the round closes.
func (s *schedule) end(order []*probeState) time.Time {
	var end time.Time
	for _, st := range order {
		if d := st.deadline(s.window); d.After(end) {
			end = d
		}
	}
	return end
}

// retry is a scheduled re-send.
type retry struct {
	due time.Time
	st  *probeState
}

type retryHeap []retry

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h retryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)        { *h = append(*h, x.(retry)) }
func (h *retryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

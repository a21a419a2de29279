// SPDX-License-Identifier: Apache-2.0

package check

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Settler holds back findings that may be a moment of lag rather than a
// problem: a Service created a second ago has no virtual server yet because
// kube-proxy has not synced, not because it is broken. Reporting such a
// finding at once would flip a condition on every node for every new Service
// (two Node writes per node per change); a finding only counts once it has
// been seen for Grace. The zero Grace counts everything at once (one-shot
// callers such as diagnose have no history). Safe for concurrent use.
type Settler struct {
	// Grace is how long a finding must persist before it counts.
	Grace time.Duration
	// Clock is the time source; nil means the real clock.
	Clock clock.PassiveClock

	// mu guards first.
	mu sync.Mutex
	// first is when each present finding key was first seen.
	first map[string]time.Time
}

// Settled takes the keys of the findings of this run and reports, for each,
// whether it has persisted for Grace. Keys absent from this run are
// forgotten: a finding that goes away and comes back starts over.
func (s *Settler) Settled(keys []string) []bool {
	out := make([]bool, len(keys))
	if s == nil || s.Grace <= 0 {
		for i := range out {
			out[i] = true
		}
		return out
	}
	c := s.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	now := c.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]time.Time, len(keys))
	for i, k := range keys {
		t, ok := s.first[k]
		if !ok {
			t = now
		}
		next[k] = t
		out[i] = now.Sub(t) >= s.Grace
	}
	s.first = next
	return out
}

// KeepSettled returns the items of this run that have persisted for s's
// Grace, each known by key(item) (see [Settler.Settled]), in their order.
func KeepSettled[T any](s *Settler, items []T, key func(T) string) []T {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = key(it)
	}
	ok := s.Settled(keys)
	out := items[:0:0]
	for i, it := range items {
		if ok[i] {
			out = append(out, it)
		}
	}
	return out
}

// SPDX-License-Identifier: Apache-2.0

package check

import (
	"context"
	"sync"
	"time"
)

// Every wraps a Checker so that it really runs at most once per interval:
// a Run sooner than interval after the last real run (one that returned a
// Result without error) returns that run's Result again. A failed run is
// retried at the next Run. It is for advisory checks whose reads are costly
// and whose answer changes with upgrades, not with traffic (the
// nftables-readiness report in the agent).
type Every struct {
	c        Checker
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	last time.Time
	res  Result
}

// NewEvery wraps c; now is the clock (nil is time.Now).
func NewEvery(c Checker, interval time.Duration, now func() time.Time) *Every {
	if now == nil {
		now = time.Now
	}
	return &Every{c: c, interval: interval, now: now}
}

// Name implements Checker.
func (e *Every) Name() string { return e.c.Name() }

// Run implements Checker.
func (e *Every) Run(ctx context.Context) (Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && e.now().Sub(e.last) < e.interval {
		return e.res, nil
	}
	start := e.now()
	res, err := e.c.Run(ctx)
	if err != nil {
		return res, err
	}
	e.last, e.res = start, res
	// What the run changed happened once: a cached copy does not repeat it.
	e.res.Actions = nil
	return res, nil
}

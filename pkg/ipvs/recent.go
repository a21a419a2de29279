// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Recent reads through an Interface and remembers the last table it read,
// so that a second check of the same resync can use it instead of dumping
// the kernel's table again (at 10,000 virtual servers the dump is most of
// a resync's CPU). Callers must not modify the tables it returns. Safe for
// concurrent use.
type Recent struct {
	inner Interface
	clock clock.PassiveClock

	// mu guards last and at.
	mu   sync.Mutex
	last Table
	at   time.Time
}

var _ Interface = (*Recent)(nil)

// NewRecent returns a Recent over inner.
func NewRecent(inner Interface) *Recent { return &Recent{inner: inner, clock: clock.RealClock{}} }

// Table reads the table from the kernel and remembers it.
func (r *Recent) Table(ctx context.Context) (Table, error) {
	t, err := r.inner.Table(ctx)
	if err == nil {
		r.mu.Lock()
		r.last, r.at = t, r.clock.Now()
		r.mu.Unlock()
	}
	return t, err
}

// Within returns an Interface that serves the remembered table while it is
// younger than maxAge, and reads (and remembers) a new one otherwise.
func (r *Recent) Within(maxAge time.Duration) Interface { return recentWithin{r, maxAge} }

type recentWithin struct {
	r      *Recent
	maxAge time.Duration
}

func (w recentWithin) Table(ctx context.Context) (Table, error) {
	w.r.mu.Lock()
	t, at := w.r.last, w.r.at
	w.r.mu.Unlock()
	if t != nil && w.r.clock.Now().Sub(at) < w.maxAge {
		return t, nil
	}
	return w.r.Table(ctx)
}

// SPDX-License-Identifier: Apache-2.0

package results

import (
	"sync"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// State is what the Store knows about one check.
type State struct {
	// Name is the check's name.
	Name string
	// Result is the latest result (an Errored result after an infrastructure
	// error); zero until the first run.
	Result check.Result
	// Ran reports whether the check has finished at least one run.
	Ran bool
	// LastRun is when the latest run started.
	LastRun time.Time
	// LastSuccess is when the latest run without an infrastructure error
	// started; zero if none yet.
	LastSuccess time.Time
	// Duration is how long the latest run took.
	Duration time.Duration
	// Runs counts finished runs; Errors counts those that ended in an
	// infrastructure error.
	Runs, Errors uint64
	// LastError is the latest run's infrastructure error, "" when it succeeded.
	LastError string
}

// Store holds the latest State per check. It is safe for concurrent use.
type Store struct {
	// mu guards states; names is immutable after NewStore.
	mu     sync.RWMutex
	names  []string
	states map[string]*State
}

// NewStore returns a Store for the named checks, reported in that order.
func NewStore(names ...string) *Store {
	s := &Store{states: make(map[string]*State, len(names))}
	for _, n := range names {
		if _, dup := s.states[n]; dup {
			continue
		}
		s.names = append(s.names, n)
		s.states[n] = &State{Name: n}
	}
	return s
}

// Names returns the checks the Store tracks, in order.
func (s *Store) Names() []string { return append([]string(nil), s.names...) }

// Record stores the outcome of one run of check name that started at start
// and took d. A non-nil err is an infrastructure error: r should then be the
// Errored result. Unknown names are ignored.
func (s *Store) Record(name string, r check.Result, err error, start time.Time, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[name]
	if !ok {
		return
	}
	st.Result, st.Ran, st.LastRun, st.Duration = r, true, start, d
	st.Runs++
	if err != nil {
		st.Errors++
		st.LastError = err.Error()
		return
	}
	st.LastError = ""
	st.LastSuccess = start
}

// Snapshot returns the latest result of every check that has run, in order.
func (s *Store) Snapshot() []check.Result {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]check.Result, 0, len(s.names))
	for _, n := range s.names {
		if st := s.states[n]; st.Ran {
			out = append(out, st.Result)
		}
	}
	return out
}

// States returns a copy of every check's State, in order.
func (s *Store) States() []State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]State, 0, len(s.names))
	for _, n := range s.names {
		out = append(out, *s.states[n])
	}
	return out
}

// AllRan reports whether every tracked check has finished at least one run.
func (s *Store) AllRan() bool { return s.AllRanSince(time.Time{}) }

// AllRanSince reports whether every tracked check has finished a run that
// started at t or later.
func (s *Store) AllRanSince(t time.Time) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, st := range s.states {
		if !st.Ran || st.LastRun.Before(t) {
			return false
		}
	}
	return true
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
	"github.com/ipvs-guard/ipvs-guard/pkg/results"
)

// StoreSnapshot returns the snapshot function for the agent: the latest
// results and run counts from its results store, and the conditions the
// agent publishes for them (nodestatus.Conditions over the enabled checks).
func StoreSnapshot(store *results.Store, enabled []string) func() Snapshot {
	return func() Snapshot {
		states := store.States()
		snap := Snapshot{Checks: make([]CheckRuns, 0, len(states))}
		for _, st := range states {
			snap.Checks = append(snap.Checks, CheckRuns{
				Name: st.Name, Runs: st.Runs, Errors: st.Errors,
				LastSuccess: st.LastSuccess, LastDuration: st.Duration,
			})
			if st.Ran {
				snap.Results = append(snap.Results, st.Result)
			}
		}
		for _, c := range nodestatus.Conditions(snap.Results, enabled) {
			snap.Conditions = append(snap.Conditions, Condition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason})
		}
		return snap
	}
}

// Instrument wraps a checker so every run is observed in m (duration
// histogram, ARP probe round-trip times). Give the agent the wrapped checkers.
func Instrument(c check.Checker, m *Metrics) check.Checker {
	return instrumented{Checker: c, m: m, now: time.Now}
}

type instrumented struct {
	check.Checker
	m   *Metrics
	now func() time.Time
}

// Run implements check.Checker.
func (i instrumented) Run(ctx context.Context) (check.Result, error) {
	start := i.now()
	res, err := i.Checker.Run(ctx)
	r := res
	if r.Name == "" {
		r.Name = i.Checker.Name()
	}
	i.m.ObserveCheck(r, err, i.now().Sub(start))
	return res, err
}

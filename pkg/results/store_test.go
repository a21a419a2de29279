// SPDX-License-Identifier: Apache-2.0

package results

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

func TestStore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewStore(check.NameModules, check.NameARP, check.NameModules)
	if s.AllRan() || len(s.Snapshot()) != 0 {
		t.Fatal("fresh store claims results")
	}
	ok := check.Result{Name: check.NameModules, Status: check.StatusOK}
	s.Record(check.NameModules, ok, nil, t0, time.Second)
	boom := errors.New("netlink: EPERM")
	s.Record(check.NameARP, check.Errored(check.NameARP, boom), boom, t0.Add(time.Minute), 2*time.Second)
	s.Record("nosuch", ok, nil, t0, 0)
	if !s.AllRan() {
		t.Error("AllRan = false after every check ran")
	}
	want := []State{
		{Name: check.NameModules, Result: ok, Ran: true, LastRun: t0, LastSuccess: t0, Duration: time.Second, Runs: 1},
		{Name: check.NameARP, Result: check.Errored(check.NameARP, boom), Ran: true, LastRun: t0.Add(time.Minute),
			Duration: 2 * time.Second, Runs: 1, Errors: 1, LastError: "netlink: EPERM"},
	}
	if diff := cmp.Diff(want, s.States()); diff != "" {
		t.Errorf("States (-want +got):\n%s", diff)
	}
	if got := s.Snapshot(); len(got) != 2 || got[0].Name != check.NameModules || got[1].Status != check.StatusError {
		t.Errorf("Snapshot = %+v", got)
	}
}

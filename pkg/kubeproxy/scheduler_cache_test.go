// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

func TestCached(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	answers := []struct {
		sched string
		err   error
	}{{"lc", nil}, {"", errors.New("forbidden")}, {"wrr", nil}}
	calls := 0
	src := Cached(SchedulerSource{Name: FromConfigMap, Get: func(context.Context) (string, error) {
		a := answers[min(calls, len(answers)-1)]
		calls++
		return a.sched, a.err
	}}, time.Minute, clk)
	type got struct {
		Sched string
		Err   bool
		Calls int
	}
	ask := func() got {
		s, err := src.Get(context.Background())
		return got{s, err != nil, calls}
	}
	steps := []struct {
		advance time.Duration
		want    got
	}{
		{0, got{"lc", false, 1}},
		{59 * time.Second, got{"lc", false, 1}}, // reused
		{time.Second, got{"", true, 2}},         // asked again; the error is reused too
		{30 * time.Second, got{"", true, 2}},
		{30 * time.Second, got{"wrr", false, 3}},
	}
	for i, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		if diff := cmp.Diff(st.want, ask()); diff != "" {
			t.Errorf("step %d (-want +got):\n%s", i, diff)
		}
	}
	if src.Name != FromConfigMap {
		t.Errorf("Name = %q", src.Name)
	}
}

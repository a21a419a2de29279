// SPDX-License-Identifier: Apache-2.0

package check

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

func TestSettler(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := &Settler{Grace: 10 * time.Second, Clock: clk}
	steps := []struct {
		advance time.Duration
		keys    []string
		want    []bool
	}{
		{0, []string{"a"}, []bool{false}},
		{5 * time.Second, []string{"a", "b"}, []bool{false, false}},
		{5 * time.Second, []string{"a", "b"}, []bool{true, false}},
		{time.Second, []string{"b"}, []bool{false}},                // a went away
		{5 * time.Second, []string{"a", "b"}, []bool{false, true}}, // a starts over
		{0, nil, []bool{}},
	}
	for i, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		if diff := cmp.Diff(st.want, s.Settled(st.keys)); diff != "" {
			t.Errorf("step %d (-want +got):\n%s", i, diff)
		}
	}
	var zero *Settler
	if diff := cmp.Diff([]bool{true, true}, zero.Settled([]string{"x", "y"})); diff != "" {
		t.Errorf("nil settler (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{true}, (&Settler{}).Settled([]string{"x"})); diff != "" {
		t.Errorf("zero grace (-want +got):\n%s", diff)
	}
}

func TestKeepSettled(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := &Settler{Grace: 10 * time.Second, Clock: clk}
	key := func(n int) string { return string(rune('a' + n)) }
	if got := KeepSettled(s, []int{0, 1}, key); len(got) != 0 {
		t.Errorf("first sight kept %v", got)
	}
	clk.SetTime(clk.Now().Add(10 * time.Second))
	if diff := cmp.Diff([]int{0}, KeepSettled(s, []int{2, 0}, key)); diff != "" {
		t.Errorf("after the grace (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{3, 4}, KeepSettled(nil, []int{3, 4}, key)); diff != "" {
		t.Errorf("nil settler (-want +got):\n%s", diff)
	}
}

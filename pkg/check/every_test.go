// SPDX-License-Identifier: Apache-2.0

package check

import (
	"context"
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	tests := []struct {
		name      string
		errs      []error // what each real run returns
		advance   []time.Duration
		wantRuns  int
		wantCalls []bool // whether each Run returned an error
	}{
		{name: "cached within the interval", errs: []error{nil}, advance: []time.Duration{0, time.Minute, 58 * time.Minute}, wantRuns: 1, wantCalls: []bool{false, false, false}},
		{name: "runs again after the interval", errs: []error{nil, nil}, advance: []time.Duration{0, time.Hour}, wantRuns: 2, wantCalls: []bool{false, false}},
		{name: "a failed run is retried at once", errs: []error{errBoom, nil}, advance: []time.Duration{0, time.Second, time.Second}, wantRuns: 2, wantCalls: []bool{true, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			runs := 0
			c := Func{CheckName: NameNFTablesReadiness, Fn: func(context.Context) (Result, error) {
				err := tt.errs[runs]
				runs++
				return Result{Name: NameNFTablesReadiness, Status: StatusOK, Actions: []string{"did"}}, err
			}}
			e := NewEvery(c, time.Hour, func() time.Time { return now })
			for i, d := range tt.advance {
				now = now.Add(d)
				res, err := e.Run(context.Background())
				if (err != nil) != tt.wantCalls[i] {
					t.Fatalf("run %d: err %v", i, err)
				}
				if i > 0 && err == nil && runs == 1 && len(res.Actions) != 0 {
					t.Errorf("run %d: a cached result repeats the actions %q", i, res.Actions)
				}
			}
			if runs != tt.wantRuns {
				t.Errorf("real runs = %d, want %d", runs, tt.wantRuns)
			}
			if e.Name() != NameNFTablesReadiness {
				t.Errorf("Name = %q", e.Name())
			}
		})
	}

}

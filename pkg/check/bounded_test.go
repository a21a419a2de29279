// SPDX-License-Identifier: Apache-2.0

package check

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestBounded(t *testing.T) {
	release := make(chan struct{})
	b := Bound(Func{CheckName: "modules", Fn: func(context.Context) (Result, error) {
		<-release
		return Result{Status: StatusOK}, nil
	}})
	if Bound(b) != b {
		t.Error("Bound re-wrapped a Bounded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := b.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stuck run: %v, want the context's error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %v", d)
	}
	if _, err := b.Run(context.Background()); !errors.Is(err, ErrStillRunning) {
		t.Errorf("second run while the first is stuck: %v, want ErrStillRunning", err)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := b.Run(context.Background())
		if err == nil && res.Status == StatusOK {
			break
		}
		if !errors.Is(err, ErrStillRunning) || time.Now().After(deadline) {
			t.Fatalf("after release: %v %v", res, err)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if _, err := b.Run(ctx); err == nil {
		t.Error("a run with an ended context ran")
	}
}

// TestBoundedBackToBack: a run that returned is over. The next Run, started
// the moment the last one returned (the workqueue does that under Service
// churn), runs instead of failing with ErrStillRunning, which would turn the
// condition Unknown and write the Node.
func TestBoundedBackToBack(t *testing.T) {
	b := Bound(Func{CheckName: "arp", Fn: func(context.Context) (Result, error) {
		return Result{Status: StatusOK}, nil
	}})
	for i := range 20000 {
		if _, err := b.Run(context.Background()); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
}

// TestBoundedKeepsActions: what a run changed on the node before it was
// interrupted, or before it failed, comes back with the error and into the
// Errored result, in the order it was recorded.
func TestBoundedKeepsActions(t *testing.T) {
	recorded := []string{"wrote /etc/modules-load.d/ipvs.conf: declared ip_vs", "loaded ip_vs"}
	tests := []struct {
		name        string
		fn          func(ctx context.Context, release <-chan struct{}) (Result, error)
		cancel      bool
		wantErr     error
		wantActions []string
		wantMessage string
	}{
		{
			name: "interrupted after changes",
			fn: func(ctx context.Context, release <-chan struct{}) (Result, error) {
				for _, a := range recorded {
					Record(ctx, a)
				}
				<-release // ignores its context
				return Result{Status: StatusOK}, nil
			},
			cancel:      true,
			wantErr:     context.Canceled,
			wantActions: recorded,
			wantMessage: "modules check could not run: interrupted (context canceled) after: wrote /etc/modules-load.d/ipvs.conf: declared ip_vs; loaded ip_vs",
		},
		{
			name: "interrupted before any change",
			fn: func(_ context.Context, release <-chan struct{}) (Result, error) {
				<-release
				return Result{}, nil
			},
			cancel:      true,
			wantErr:     context.Canceled,
			wantMessage: "modules check could not run: interrupted (context canceled)",
		},
		{
			name: "failed after changes",
			fn: func(ctx context.Context, _ <-chan struct{}) (Result, error) {
				Record(ctx, "loaded ip_vs")
				return Result{}, errBoom
			},
			wantErr:     errBoom,
			wantActions: []string{"loaded ip_vs"},
			wantMessage: "modules check could not run: boom after: loaded ip_vs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			b := Bound(Func{CheckName: NameModules, Fn: func(ctx context.Context) (Result, error) { return tt.fn(ctx, release) }})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				// Cancel once the changes are recorded: the run then blocks.
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			_, err := b.Run(ctx)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			res := Errored(NameModules, err)
			if !slices.Equal(res.Actions, tt.wantActions) {
				t.Errorf("Actions = %q, want %q", res.Actions, tt.wantActions)
			}
			if res.Message != tt.wantMessage {
				t.Errorf("Message = %q, want %q", res.Message, tt.wantMessage)
			}
		})
	}
}

var errBoom = errors.New("boom")

// TestRecordOutsideBounded: Record without a Bounded run is a no-op, and a
// run that returns its Result reports its own Actions, not the record.
func TestRecordOutsideBounded(t *testing.T) {
	Record(context.Background(), "nothing to record into")
	b := Bound(Func{CheckName: NameModules, Fn: func(ctx context.Context) (Result, error) {
		Record(ctx, "loaded ip_vs")
		return Result{Status: StatusOK, Actions: []string{"loaded ip_vs, ip_vs_rr"}}, nil
	}})
	res, err := b.Run(context.Background())
	if err != nil || !slices.Equal(res.Actions, []string{"loaded ip_vs, ip_vs_rr"}) {
		t.Errorf("Run = %+v, %v", res, err)
	}
}

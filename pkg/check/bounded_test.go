// SPDX-License-Identifier: Apache-2.0

package check

import (
	"context"
	"errors"
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

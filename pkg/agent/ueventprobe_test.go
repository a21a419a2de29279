// SPDX-License-Identifier: Apache-2.0

//go:build linux

package agent

import (
	"context"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// TestUeventLoopback sends a synthetic module uevent to the kernel group and
// expects the watcher to deliver it (needs CAP_NET_ADMIN).
func TestUeventLoopback(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan ModuleEvent, 10)
	done := make(chan error, 1)
	go func() { done <- WatchModuleUevents(ctx, func(ev ModuleEvent) { got <- ev }) }()
	want := ModuleEvent{Action: "remove", Module: "ip_vs_test"}
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case ev := <-got:
			if ev == want {
				break loop
			}
		case <-tick.C:
			if err := SendModuleUevent(want, 1); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("no uevent received in 5 s")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watcher: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("watcher did not stop on cancel")
	}
}

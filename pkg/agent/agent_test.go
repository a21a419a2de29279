// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// scriptedCheck returns the results (and errors) it is given, in order,
// repeating the last one.
type scriptedCheck struct {
	name string
	mu   sync.Mutex
	seq  []scripted
	runs atomic.Int64
}

type scripted struct {
	status check.Status
	err    error
}

func (s *scriptedCheck) Name() string { return s.name }

func (s *scriptedCheck) Run(context.Context) (check.Result, error) {
	n := s.runs.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.seq[min(int(n)-1, len(s.seq)-1)]
	return check.Result{Name: s.name, Status: st.status, Reason: "R" + string(st.status), Message: s.name + " " + string(st.status) + "."}, st.err
}

// recordingPublisher records what the agent hands the status publisher.
type recordingPublisher struct {
	mu          sync.Mutex
	conds       [][]nodestatus.Condition
	annotations map[string]string
}

func (r *recordingPublisher) SetConditions(c []nodestatus.Condition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conds = append(r.conds, c)
}

func (r *recordingPublisher) SetAnnotation(k, v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.annotations == nil {
		r.annotations = map[string]string{}
	}
	r.annotations[k] = v
}

func (r *recordingPublisher) last() []nodestatus.Condition {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.conds) == 0 {
		return nil
	}
	return r.conds[len(r.conds)-1]
}

func (r *recordingPublisher) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conds)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func startLoop(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return runLoop(t, a)
}

// runLoop runs a until the test ends.
func runLoop(t *testing.T, a *Agent) *Agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return a
}

func TestLoopPublishesAfterFirstPassAndResyncs(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mods := &scriptedCheck{name: check.NameModules, seq: []scripted{{status: check.StatusOK}, {status: check.StatusProblem}}}
	arp := &scriptedCheck{name: check.NameARP, seq: []scripted{{status: check.StatusSkipped}}}
	pub := &recordingPublisher{}
	a := startLoop(t, Config{NodeName: "n", Checkers: []check.Checker{mods, arp}, Publisher: pub, Clock: clk,
		ResyncPeriod: time.Minute, MACs: func() (map[string]string, error) { return map[string]string{"eth0": "02:00:00:00:00:01"}, nil }})

	waitUntil(t, "first publish", func() bool { return pub.count() > 0 })
	want := []nodestatus.Condition{
		{Type: nodestatus.IPVSModulesMissing, Status: nodestatus.StatusFalse, Reason: "Rok", Message: "modules ok."},
		{Type: nodestatus.LoadBalancerARPFailing, Status: nodestatus.StatusFalse, Reason: "Rskipped", Message: "Nothing to check: arp skipped."},
	}
	if diff := cmp.Diff(want, pub.last()); diff != "" {
		t.Errorf("first conditions (-want +got):\n%s", diff)
	}
	if !a.Ready() {
		t.Error("not Ready after the first pass")
	}
	waitUntil(t, "MAC annotation", func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return pub.annotations[nodestatus.MACsAnnotation] == `{"eth0":"02:00:00:00:00:01"}`
	})

	// Nothing runs again until the resync ticker fires.
	time.Sleep(20 * time.Millisecond)
	if n := mods.runs.Load(); n != 1 {
		t.Fatalf("modules ran %d times before any resync", n)
	}
	waitUntil(t, "resync ticker", clk.HasWaiters)
	clk.Step(time.Minute)
	waitUntil(t, "second run", func() bool { return mods.runs.Load() == 2 && arp.runs.Load() == 2 })
	waitUntil(t, "problem published", func() bool {
		l := pub.last()
		return len(l) > 0 && l[0].Status == nodestatus.StatusTrue
	})
	if st := a.Store().States(); st[0].Runs != 2 || st[0].Result.Status != check.StatusProblem {
		t.Errorf("store = %+v", st[0])
	}
}

func TestLoopRequeuesInfrastructureErrorsWithBackoff(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	boom := errors.New("netlink: operation not permitted")
	c := &scriptedCheck{name: check.NameIPVS, seq: []scripted{{status: check.StatusOK, err: boom}, {status: check.StatusOK}}}
	pub := &recordingPublisher{}
	a := startLoop(t, Config{NodeName: "n", Checkers: []check.Checker{c}, Publisher: pub, Clock: clk, ResyncPeriod: time.Hour})
	waitUntil(t, "first run", func() bool { return c.runs.Load() == 1 })
	waitUntil(t, "Unknown published", func() bool {
		l := pub.last()
		return len(l) == 1 && l[0].Status == nodestatus.StatusUnknown && l[0].Reason == "CheckFailed"
	})
	if st := a.Store().States()[0]; st.Errors != 1 || st.LastError != boom.Error() {
		t.Errorf("store after error = %+v", st)
	}
	// The retry waits for the rate limiter's backoff (500 ms), not for the hourly resync.
	time.Sleep(20 * time.Millisecond)
	if c.runs.Load() != 1 {
		t.Fatal("retried without backoff")
	}
	clk.Step(500 * time.Millisecond)
	waitUntil(t, "retry after backoff", func() bool { return c.runs.Load() == 2 })
	waitUntil(t, "False published", func() bool {
		l := pub.last()
		return len(l) == 1 && l[0].Status == nodestatus.StatusFalse
	})
}

func TestLoopWakesOnModulesLoadDirChange(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(t.TempDir(), "not-yet")
	c := &scriptedCheck{name: check.NameModules, seq: []scripted{{status: check.StatusOK}}}
	startLoop(t, Config{NodeName: "n", Checkers: []check.Checker{c}, ResyncPeriod: time.Hour, ModulesLoadDirs: []string{missing, dir}})
	waitUntil(t, "first run", func() bool { return c.runs.Load() == 1 })
	time.Sleep(50 * time.Millisecond) // the watch is added before the first run is queued; settle anyway
	if err := os.WriteFile(filepath.Join(dir, "ipvs.conf"), []byte("ip_vs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "run after the file write", func() bool { return c.runs.Load() >= 2 })
}

func TestInitialPublishDelay(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	block := make(chan struct{})
	slow := check.Func{CheckName: check.NameARP, Fn: func(ctx context.Context) (check.Result, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return check.Result{Status: check.StatusOK}, nil
	}}
	t.Cleanup(func() { close(block) })
	fast := &scriptedCheck{name: check.NameModules, seq: []scripted{{status: check.StatusProblem}}}
	pub := &recordingPublisher{}
	startLoop(t, Config{NodeName: "n", Checkers: []check.Checker{fast, slow}, Publisher: pub, Clock: clk,
		ResyncPeriod: time.Hour, InitialPublishDelay: 10 * time.Second})
	// modules runs; arp blocks (on its own worker).
	waitUntil(t, "modules ran", func() bool { return fast.runs.Load() == 1 })
	time.Sleep(20 * time.Millisecond)
	if pub.count() != 0 {
		t.Fatal("published before every check ran and before the delay")
	}
	waitUntil(t, "timers", clk.HasWaiters)
	clk.Step(10 * time.Second)
	waitUntil(t, "forced publish", func() bool { return pub.count() > 0 })
	want := []nodestatus.Condition{
		{Type: nodestatus.IPVSModulesMissing, Status: nodestatus.StatusTrue, Reason: "Rproblem", Message: "modules problem."},
		{Type: nodestatus.LoadBalancerARPFailing, Status: nodestatus.StatusUnknown, Reason: nodestatus.ReasonNotYetChecked, Message: "ipvs-guard has not finished checking arp yet."},
	}
	if diff := cmp.Diff(want, pub.last()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestFirstPublishWaitsForClusterCaches: results computed before the
// cluster caches synced are not published; the first publication carries a
// run of every check from after the sync, so an agent start costs one Node
// write, not an Unknown (or an interim message) and then the real state.
func TestFirstPublishWaitsForClusterCaches(t *testing.T) {
	var synced atomic.Bool
	var arpRuns atomic.Int64
	arp := check.Func{CheckName: check.NameARP, Fn: func(context.Context) (check.Result, error) {
		arpRuns.Add(1)
		if !synced.Load() {
			return check.Result{}, clusterview.ErrNotSynced
		}
		return check.Result{Status: check.StatusOK, Reason: "Answered", Message: "Every probed IP answered."}, nil
	}}
	modules := &scriptedCheck{name: check.NameModules, seq: []scripted{{status: check.StatusOK}}}
	pub := &recordingPublisher{}
	a, err := New(Config{NodeName: "n", Checkers: []check.Checker{modules, arp}, Publisher: pub,
		ResyncPeriod: time.Hour, InitialPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a.viewSynced = synced.Load
	runLoop(t, a)
	waitUntil(t, "both checks ran before the sync", func() bool { return modules.runs.Load() >= 1 && arpRuns.Load() >= 1 })
	time.Sleep(50 * time.Millisecond)
	if n := pub.count(); n != 0 {
		t.Fatalf("published %d times before the caches synced: %v", n, pub.last())
	}
	if a.Ready() {
		t.Error("ready before the first publication")
	}
	synced.Store(true)
	waitUntil(t, "first publication", func() bool { return pub.count() > 0 })
	time.Sleep(50 * time.Millisecond)
	want := []nodestatus.Condition{
		{Type: nodestatus.IPVSModulesMissing, Status: nodestatus.StatusFalse, Reason: "Rok", Message: "modules ok."},
		{Type: nodestatus.LoadBalancerARPFailing, Status: nodestatus.StatusFalse, Reason: "Answered", Message: "Every probed IP answered."},
	}
	// The publisher writes only what changed: every set it was handed must
	// be the final state, or a start would write the Node twice.
	pub.mu.Lock()
	for i, got := range pub.conds {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("publication %d (-want +got):\n%s", i+1, diff)
		}
	}
	pub.mu.Unlock()
	if modules.runs.Load() < 2 {
		t.Errorf("modules ran %d times: the sync did not run every check again", modules.runs.Load())
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	c := &scriptedCheck{name: check.NameModules}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no node", Config{Checkers: []check.Checker{c}}},
		{"duplicate check", Config{NodeName: "n", Checkers: []check.Checker{c, c}}},
		{"reserved name", Config{NodeName: "n", Checkers: []check.Checker{check.Func{CheckName: string(KeyNode)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

// TestStopsWhileACheckIgnoresItsContext: SIGTERM (a cancelled context)
// ends Run promptly even when a check is stuck in a call that never
// returns, and a timed-out stuck check is reported, not run twice at once.
func TestStopsWhileACheckIgnoresItsContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var runs atomic.Int64
	stuck := check.Func{CheckName: check.NameModules, Fn: func(context.Context) (check.Result, error) {
		runs.Add(1)
		<-release
		return check.Result{Status: check.StatusOK}, nil
	}}
	a, err := New(Config{NodeName: "n", Checkers: []check.Checker{stuck}, Publisher: &recordingPublisher{}, CheckTimeout: 50 * time.Millisecond, ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	waitUntil(t, "the check to start", func() bool { return runs.Load() == 1 })
	waitUntil(t, "the timed-out run recorded", func() bool {
		st := a.Store().States()
		return st[0].Runs > 0 && st[0].Result.Status == check.StatusError
	})
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel while a check was stuck")
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the stuck check was started %d times, want 1", n)
	}
}

// blockingCheck returns OK on its first run and blocks every later run
// until released or its context ends (an ARP round over silent IPs).
type blockingCheck struct {
	name    string
	runs    atomic.Int64
	blocked chan struct{} // receives once a run blocks
	release chan struct{}
}

func newBlockingCheck(name string) *blockingCheck {
	return &blockingCheck{name: name, blocked: make(chan struct{}, 1), release: make(chan struct{})}
}

func (b *blockingCheck) Name() string { return b.name }

func (b *blockingCheck) Run(ctx context.Context) (check.Result, error) {
	if b.runs.Add(1) > 1 {
		select {
		case b.blocked <- struct{}{}:
		default:
		}
		select {
		case <-b.release:
		case <-ctx.Done():
		}
	}
	return check.Result{Status: check.StatusOK, Reason: "Answered", Message: "Every probed IP answered."}, nil
}

// TestSlowCheckDoesNotDelayAnother: while one check runs long (an ARP
// round up to CheckTimeout), a modules-load.d change is checked and its
// condition published at once, from every kind of wake-up.
func TestSlowCheckDoesNotDelayAnother(t *testing.T) {
	const bound = 2 * time.Second
	tests := []struct {
		name string
		wake func(t *testing.T, a *Agent, dir string)
	}{
		{"inotify", func(t *testing.T, _ *Agent, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "ipvs.conf"), []byte("ip_vs\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"uevent", func(_ *testing.T, a *Agent, _ string) {
			// What the uevent watcher enqueues (its socket needs root).
			a.enqueue(check.NameModules, check.NameIPVS)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			dir := t.TempDir()
			mods := &scriptedCheck{name: check.NameModules, seq: []scripted{{status: check.StatusOK}, {status: check.StatusOK}, {status: check.StatusProblem}}}
			ipvsc := &scriptedCheck{name: check.NameIPVS, seq: []scripted{{status: check.StatusOK}}}
			arp := newBlockingCheck(check.NameARP)
			t.Cleanup(func() { close(arp.release) })
			pub := &recordingPublisher{}
			a := startLoop(t, Config{NodeName: "n", Checkers: []check.Checker{arp, mods, ipvsc}, Publisher: pub, Clock: clk,
				ResyncPeriod: time.Minute, CheckTimeout: time.Minute, ModulesLoadDirs: []string{dir}})
			waitUntil(t, "first publication", a.Ready)

			// A resync starts an ARP round that does not end.
			waitUntil(t, "resync ticker", clk.HasWaiters)
			clk.Step(time.Minute)
			select {
			case <-arp.blocked:
			case <-time.After(5 * time.Second):
				t.Fatal("the ARP round never started")
			}
			waitUntil(t, "the resync's modules run", func() bool { return mods.runs.Load() == 2 })

			start := time.Now()
			tt.wake(t, a, dir)
			deadline := start.Add(bound)
			for {
				if l := pub.last(); len(l) > 0 && l[0].Type == nodestatus.IPVSModulesMissing && l[0].Status == nodestatus.StatusTrue {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("IPVSModulesMissing not published True within %s while the ARP check ran (modules ran %d times)", bound, mods.runs.Load())
				}
				time.Sleep(time.Millisecond)
			}
			if n := arp.runs.Load(); n != 2 {
				t.Errorf("arp started %d times, want 2 (never twice at once)", n)
			}
		})
	}
}

// gatedPublisher blocks the first SetConditions until released.
type gatedPublisher struct {
	recordingPublisher
	entered, release chan struct{}
	calls            atomic.Int64
}

func (g *gatedPublisher) SetConditions(c []nodestatus.Condition) {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.release
	}
	g.recordingPublisher.SetConditions(c)
}

// TestPublishHandsOverTheLatestResults: two publications at once (the
// initial publish timer and a worker, or two workers) never hand the
// publisher an older set after a newer one.
func TestPublishHandsOverTheLatestResults(t *testing.T) {
	mods := &scriptedCheck{name: check.NameModules}
	pub := &gatedPublisher{entered: make(chan struct{}), release: make(chan struct{})}
	a, err := New(Config{NodeName: "n", Checkers: []check.Checker{mods}, Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	a.store.Record(check.NameModules, check.Result{Name: check.NameModules, Status: check.StatusOK, Reason: "Old", Message: "old"}, nil, t0, 0)
	first := make(chan struct{})
	go func() { a.publish(true); close(first) }() // snapshot: Old; then blocks in the publisher
	<-pub.entered

	a.store.Record(check.NameModules, check.Result{Name: check.NameModules, Status: check.StatusProblem, Reason: "New", Message: "new"}, nil, t0.Add(time.Second), 0)
	second := make(chan struct{})
	go func() { a.publish(false); close(second) }()
	select {
	case <-second: // it did not wait for the first: the bug shows below
	case <-time.After(100 * time.Millisecond): // waiting for the first, as it should
	}
	close(pub.release)
	<-first
	<-second
	if l := pub.last(); len(l) != 1 || l[0].Reason != "New" {
		t.Errorf("last publication = %+v, want the latest result (New)", l)
	}
}

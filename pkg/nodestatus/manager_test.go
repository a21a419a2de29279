// SPDX-License-Identifier: Apache-2.0

package nodestatus_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus/nodestatustest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func seededNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "uid-a"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour)), LastHeartbeatTime: metav1.NewTime(t0.Add(-time.Minute)),
		}}},
	}
}

type fixture struct {
	client *nodestatustest.FakeClient
	clock  *testingclock.FakeClock
	rec    *events.FakeRecorder
	m      *nodestatus.Manager
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{client: nodestatustest.NewFakeClient(seededNode()), clock: testingclock.NewFakeClock(t0), rec: events.NewFakeRecorder(100)}
	m, err := nodestatus.NewManager(nodestatus.ManagerConfig{NodeName: "node-a", Client: f.client, Recorder: f.rec, Clock: f.clock,
		CachedNode: func() (*corev1.Node, error) { return f.client.Node(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func (f *fixture) sync(t *testing.T, conds ...nodestatus.Condition) {
	t.Helper()
	f.m.SetConditions(conds)
	if err := f.m.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func healthy() []nodestatus.Condition {
	var out []nodestatus.Condition
	for _, t := range nodestatus.AllConditionTypes() {
		out = append(out, nodestatus.Condition{Type: t, Status: nodestatus.StatusFalse, Reason: nodestatus.ReasonCheckPassed, Message: "fine."})
	}
	return out
}

func withStatus(conds []nodestatus.Condition, t nodestatus.ConditionType, s nodestatus.Status, reason, msg string) []nodestatus.Condition {
	out := append([]nodestatus.Condition(nil), conds...)
	for i := range out {
		if out[i].Type == t {
			out[i].Status, out[i].Reason, out[i].Message = s, reason, msg
		}
	}
	return out
}

func condition(n *corev1.Node, t nodestatus.ConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == string(t) {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func TestManagerInitialWriteKeepsKubeletConditions(t *testing.T) {
	f := newFixture(t)
	f.sync(t, healthy()...)
	n := f.client.Node()
	var got []string
	for _, c := range n.Status.Conditions {
		got = append(got, string(c.Type)+"="+string(c.Status))
	}
	slices.Sort(got)
	want := []string{"IPVSModulesMissing=False", "KubeProxyDataplaneDegraded=False", "KubeProxyIPVSDegraded=False", "LoadBalancerARPFailing=False", "Ready=True", "StrictARPDisabled=False"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if r := condition(n, "Ready"); r.Reason != "KubeletReady" || !r.LastHeartbeatTime.Time.Equal(t0.Add(-time.Minute)) {
		t.Errorf("kubelet's Ready changed: %+v", r)
	}
	if p := f.client.StatusPatches(); len(p) != 1 || strings.Contains(string(p[0]), `"Ready"`) {
		t.Errorf("want one patch not naming Ready, got %q", p)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("healthy start emitted events: %q", ev)
	}
}

func TestManagerNoWriteWhenUnchanged(t *testing.T) {
	f := newFixture(t)
	f.sync(t, healthy()...)
	for range 20 {
		f.clock.Step(time.Minute)
		f.sync(t, healthy()...)
	}
	if n := len(f.client.StatusPatches()); n != 1 {
		t.Errorf("status patches = %d, want 1", n)
	}
	if n := f.client.Gets(); n != 0 {
		t.Errorf("live GETs = %d, want 0 (cache used)", n)
	}
}

func TestManagerTransitions(t *testing.T) {
	f := newFixture(t)
	f.sync(t, healthy()...)

	f.clock.Step(time.Minute)
	t1 := f.clock.Now()
	bad := withStatus(healthy(), nodestatus.IPVSModulesMissing, nodestatus.StatusTrue, "ModulesNotLoaded", "ip_vs_lc is not loaded; run ipvs-guard with --remediate.")
	f.sync(t, bad...)
	c := condition(f.client.Node(), nodestatus.IPVSModulesMissing)
	if c.Status != corev1.ConditionTrue || c.Reason != "ModulesNotLoaded" || !c.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("after problem: %+v", c)
	}
	if diff := cmp.Diff([]string{"Warning ModulesNotLoaded ip_vs_lc is not loaded; run ipvs-guard with --remediate."}, f.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Same status, other reason and message: rewritten, but no transition and no event.
	f.clock.Step(time.Minute)
	bad2 := withStatus(healthy(), nodestatus.IPVSModulesMissing, nodestatus.StatusTrue, "ModulesNotPersisted", "ip_vs_lc is not declared.")
	f.sync(t, bad2...)
	c = condition(f.client.Node(), nodestatus.IPVSModulesMissing)
	if c.Reason != "ModulesNotPersisted" || !c.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("reason change moved lastTransitionTime or was lost: %+v", c)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("reason change emitted events: %q", ev)
	}
	// Other conditions kept their transition time from the start.
	if c := condition(f.client.Node(), nodestatus.StrictARPDisabled); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("untouched condition moved: %+v", c)
	}

	f.clock.Step(time.Minute)
	t3 := f.clock.Now()
	f.sync(t, healthy()...)
	c = condition(f.client.Node(), nodestatus.IPVSModulesMissing)
	if c.Status != corev1.ConditionFalse || !c.LastTransitionTime.Time.Equal(t3) {
		t.Errorf("after recovery: %+v", c)
	}
	if diff := cmp.Diff([]string{"Normal CheckPassed fine."}, f.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestManagerRemovesDisabledConditions(t *testing.T) {
	f := newFixture(t)
	f.sync(t, healthy()...)
	f.sync(t, healthy()[:3]...)
	n := f.client.Node()
	if condition(n, nodestatus.LoadBalancerARPFailing) != nil {
		t.Errorf("LoadBalancerARPFailing still present")
	}
	if condition(n, "Ready") == nil || condition(n, nodestatus.IPVSModulesMissing) == nil {
		t.Errorf("removal took other conditions: %+v", n.Status.Conditions)
	}
	f.sync(t, healthy()[:3]...)
	if n := len(f.client.StatusPatches()); n != 2 {
		t.Errorf("status patches = %d, want 2", n)
	}
}

func TestManagerRetriesConflict(t *testing.T) {
	f := newFixture(t)
	calls := 0
	f.client.BeforeStatusPatch(func(n *corev1.Node) bool {
		calls++
		if calls == 1 { // another writer slips in once
			n.Labels = map[string]string{"touched": "yes"}
			return true
		}
		return false
	})
	f.sync(t, healthy()...)
	if n := len(f.client.StatusPatches()); n != 2 {
		t.Errorf("status patches = %d, want 2 (conflict, then success)", n)
	}
	if f.client.Gets() != 1 {
		t.Errorf("want one live GET after the conflict, got %d", f.client.Gets())
	}
	n := f.client.Node()
	if condition(n, nodestatus.IPVSModulesMissing) == nil || n.Labels["touched"] != "yes" {
		t.Errorf("conflict lost data: %+v", n)
	}
}

func TestManagerRunRetriesAfterFailure(t *testing.T) {
	f := newFixture(t)
	down := apierrors.NewServiceUnavailable("apiserver down")
	f.client.InjectErrors(down, down)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	f.m.SetConditions(withStatus(healthy(), nodestatus.StrictARPDisabled, nodestatus.StatusTrue, "ArpIgnoreOff", "arp_ignore=0."))
	waitFor(t, func() bool { return len(f.client.StatusPatches()) == 1 })
	if _, err := f.m.LastSync(); !errors.Is(err, down) {
		t.Fatalf("LastSync error = %v, want the injected one", err)
	}
	// Backoff: 1 s, then 2 s.
	waitFor(t, f.clock.HasWaiters)
	f.clock.Step(time.Second)
	waitFor(t, func() bool { return len(f.client.StatusPatches()) == 2 })
	waitFor(t, f.clock.HasWaiters)
	f.clock.Step(time.Second)
	time.Sleep(50 * time.Millisecond)
	if n := len(f.client.StatusPatches()); n != 2 {
		t.Fatalf("retried before the backoff elapsed: %d patches", n)
	}
	f.clock.Step(time.Second)
	waitFor(t, func() bool { return condition(f.client.Node(), nodestatus.StrictARPDisabled) != nil })
	// The Event follows the successful patch from the manager's goroutine.
	var events []string
	waitFor(t, func() bool { events = append(events, f.events()...); return len(events) > 0 })
	time.Sleep(50 * time.Millisecond) // a second, wrong Event would show up by now
	events = append(events, f.events()...)
	if diff := cmp.Diff([]string{"Warning ArpIgnoreOff arp_ignore=0."}, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if last, err := f.m.LastSync(); err != nil || last.IsZero() {
		t.Errorf("LastSync = %v, %v", last, err)
	}
}

func TestManagerAnnotationOnlyWhenChanged(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.m.SetAnnotation("ipvs-guard.io/macs", `{"eth0":"02:00:00:00:00:01"}`)
	for range 3 {
		if err := f.m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.client.MetadataPatches()); n != 1 {
		t.Errorf("metadata patches = %d, want 1", n)
	}
	if n := len(f.client.StatusPatches()); n != 0 {
		t.Errorf("status written before any condition was set: %d", n)
	}
	f.m.SetAnnotation("ipvs-guard.io/macs", `{"eth0":"02:00:00:00:00:02"}`)
	if err := f.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.client.Node().Annotations["ipvs-guard.io/macs"]; got != `{"eth0":"02:00:00:00:00:02"}` {
		t.Errorf("annotation = %q", got)
	}
}

func TestManagerReportsNotFound(t *testing.T) {
	f := newFixture(t)
	m, err := nodestatus.NewManager(nodestatus.ManagerConfig{NodeName: "elsewhere", Client: f.client, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	m.SetConditions(healthy())
	if err := m.Sync(context.Background()); !apierrors.IsNotFound(err) {
		t.Errorf("Sync error = %v, want NotFound", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package agent

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// fakeCheck is a check whose result the test sets; it counts its runs.
type fakeCheck struct {
	name string
	mu   sync.Mutex
	res  check.Result
	err  error
	runs atomic.Int64
	// onRun, if set, runs on every Run (e.g. a remediation side effect).
	onRun func()
}

func newFakeCheck(name string) *fakeCheck {
	return &fakeCheck{name: name, res: check.Result{Name: name, Status: check.StatusOK, Reason: "AllGood", Message: name + " is fine."}}
}

func (f *fakeCheck) Name() string { return f.name }

func (f *fakeCheck) Run(context.Context) (check.Result, error) {
	defer f.runs.Add(1)
	if f.onRun != nil {
		f.onRun()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.res, f.err
}

func (f *fakeCheck) set(status check.Status, reason, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res = check.Result{Name: f.name, Status: status, Reason: reason, Message: msg}
}

func allFakeChecks() []*fakeCheck {
	var out []*fakeCheck
	for _, n := range []string{check.NameModules, check.NameKubeProxy, check.NameKubeProxySync, check.NameIPVS, check.NameARPSysctls, check.NameARP} {
		out = append(out, newFakeCheck(n))
	}
	return out
}

// named returns the fake check of fs named name.
func named(t *testing.T, fs []*fakeCheck, name string) *fakeCheck {
	t.Helper()
	for _, f := range fs {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no fake check %s", name)
	return nil
}

// without returns fs without the check named name.
func without(fs []*fakeCheck, name string) []*fakeCheck {
	var out []*fakeCheck
	for _, f := range fs {
		if f.name != name {
			out = append(out, f)
		}
	}
	return out
}

func checkers(fs []*fakeCheck) []check.Checker {
	var out []check.Checker
	for _, f := range fs {
		out = append(out, f)
	}
	return out
}

var kubeletReady = corev1.NodeCondition{
	Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
	LastHeartbeatTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), LastTransitionTime: metav1.NewTime(time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)),
}

// createNode creates a Node with kubelet's Ready condition seeded in its status.
func createNode(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{kubeletReady}
	n, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// agentUnderTest is an Agent plus its publisher wired to a real API server.
type agentUnderTest struct {
	agent  *Agent
	mgr    *nodestatus.Manager
	log    *apiservertest.RequestLog
	cancel context.CancelFunc
	done   chan struct{}
}

type agentOptions struct {
	checks  []*fakeCheck
	resync  time.Duration
	macs    func() (map[string]string, error)
	dirs    []string
	uevents bool
	// metallb watches ServiceL2Status through a dynamic client.
	metallb bool
	// real, when set, adds real checkers built over the agent's view.
	real func(v *clusterview.View) []check.Checker
	// userAgent, when set, is the agent's client's User-Agent (the audit log names it).
	userAgent string
	// peers, when set, is the agent's peers Service (--peers-service).
	peers types.NamespacedName
}

func startAgent(t *testing.T, s *apiservertest.Server, node string, o agentOptions) *agentUnderTest {
	t.Helper()
	log := &apiservertest.RequestLog{}
	cfg := log.Wrap(s.AdminConfig())
	if o.userAgent != "" {
		cfg.UserAgent = o.userAgent
	}
	cs := apiservertest.AgentClient(t, cfg)
	var dyn dynamic.Interface
	if o.metallb {
		dyn = dynamic.NewForConfigOrDie(cfg)
	}
	view := clusterview.New(node, cs, dyn, metadata.NewForConfigOrDie(cfg))
	view.UsePeersService(o.peers)
	recorder := kube.NewRecorder(cs, nodestatus.ReportingController)
	ctx, cancel := context.WithCancel(context.Background())
	go recorder.Run(ctx)
	mgr, err := nodestatus.NewManager(nodestatus.ManagerConfig{
		NodeName: node, Client: nodestatus.NewClient(cs), CachedNode: view.Node,
		Recorder: recorder,
		MinRetry: 100 * time.Millisecond, MaxRetry: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	cks := checkers(o.checks)
	if o.real != nil {
		cks = append(cks, o.real(view)...)
	}
	a, err := New(Config{
		NodeName: node, Checkers: cks, Publisher: mgr, View: view,
		ResyncPeriod: o.resync, InitialPublishDelay: 5 * time.Second,
		MACs: o.macs, ModulesLoadDirs: o.dirs, WatchUevents: o.uevents,
	})
	if err != nil {
		t.Fatal(err)
	}
	u := &agentUnderTest{agent: a, mgr: mgr, log: log, cancel: cancel, done: make(chan struct{})}
	go mgr.Run(ctx)
	go func() {
		defer close(u.done)
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent Run: %v", err)
		}
	}()
	t.Cleanup(func() { u.stop(t) })
	return u
}

func (u *agentUnderTest) stop(t *testing.T) {
	u.cancel()
	select {
	case <-u.done:
	case <-time.After(10 * time.Second):
		t.Error("agent did not stop within 10 s")
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nodeCondition(t *testing.T, cs kubernetes.Interface, node string, ct string) *corev1.NodeCondition {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == ct {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// nodeEvents lists the events.k8s.io Events about node with the given action.
func nodeEvents(t *testing.T, cs kubernetes.Interface, node, action string) []eventsv1.Event {
	t.Helper()
	list, err := cs.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

func parseMAC(s string) ([]byte, error) { return net.ParseMAC(s) }

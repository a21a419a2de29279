// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

func TestAgentConditionsEventsAndQuietResyncs(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	node := createNode(t, admin, "node-a")
	checks := allFakeChecks()
	u := startAgent(t, s, "node-a", agentOptions{checks: checks, resync: 100 * time.Millisecond,
		macs: func() (map[string]string, error) { return map[string]string{"eth0": "02:00:00:00:00:0A"}, nil }})

	eventually(t, 10*time.Second, "every condition published", func() bool {
		for _, ct := range nodestatus.AllConditionTypes() {
			if c := nodeCondition(t, admin, "node-a", string(ct)); c == nil || c.Status != corev1.ConditionFalse {
				return false
			}
		}
		return true
	})
	c := nodeCondition(t, admin, "node-a", string(nodestatus.KubeProxyIPVSDegraded))
	if c.Reason != "AllGood" || c.Message != "kube-proxy is fine. ipvs is fine." {
		t.Errorf("KubeProxyIPVSDegraded = %s/%q", c.Reason, c.Message)
	}
	eventually(t, 5*time.Second, "MAC annotation", func() bool {
		n, _ := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		return n.Annotations[nodestatus.MACsAnnotation] == `{"eth0":"02:00:00:00:00:0a"}`
	})

	// 20 resyncs with nothing changing: not a single write.
	time.Sleep(300 * time.Millisecond) // let the informer see our own writes
	before := u.log.Writes()
	runs := checks[0].runs.Load()
	eventually(t, 20*time.Second, "20 resyncs", func() bool { return checks[0].runs.Load() >= runs+20 })
	time.Sleep(200 * time.Millisecond)
	if diff := cmp.Diff(before, u.log.Writes()); diff != "" {
		t.Errorf("writes during 20 quiet resyncs (-before +after):\n%s", diff)
	}
	t.Logf("writes to reach steady state: %d (%v)", len(before), before)

	// Into a problem: the condition flips with reason and message, one Warning Event.
	checks[0].set(check.StatusProblem, "ModulesNotLoaded", "ip_vs_lc is not loaded: load it with modprobe ip_vs_lc and declare it in /etc/modules-load.d/ipvs.conf.")
	eventually(t, 5*time.Second, "IPVSModulesMissing True", func() bool {
		c := nodeCondition(t, admin, "node-a", string(nodestatus.IPVSModulesMissing))
		return c != nil && c.Status == corev1.ConditionTrue
	})
	c = nodeCondition(t, admin, "node-a", string(nodestatus.IPVSModulesMissing))
	if c.Reason != "ModulesNotLoaded" || !strings.Contains(c.Message, "ip_vs_lc") {
		t.Errorf("IPVSModulesMissing = %s/%q", c.Reason, c.Message)
	}
	trueSince := c.LastTransitionTime
	eventually(t, 5*time.Second, "the Warning Event", func() bool { return len(nodeEvents(t, admin, "node-a", "IPVSModulesMissing")) > 0 })
	runs = checks[0].runs.Load()
	eventually(t, 20*time.Second, "10 more resyncs", func() bool { return checks[0].runs.Load() >= runs+10 })
	time.Sleep(time.Second)
	evs := nodeEvents(t, admin, "node-a", "IPVSModulesMissing")
	if len(evs) != 1 {
		t.Fatalf("want exactly one Event for the transition, got %d: %+v", len(evs), evs)
	}
	e := evs[0]
	got := []string{e.Type, e.Reason, e.Action, e.Note, e.ReportingController, string(e.Regarding.UID)}
	want := []string{"Warning", "ModulesNotLoaded", "IPVSModulesMissing", c.Message, "ipvs-guard", string(node.UID)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	if c := nodeCondition(t, admin, "node-a", string(nodestatus.IPVSModulesMissing)); !c.LastTransitionTime.Equal(&trueSince) {
		t.Errorf("lastTransitionTime moved without a status change: %v → %v", trueSince, c.LastTransitionTime)
	}

	// Out of it: False again and one Normal Event.
	checks[0].set(check.StatusOK, "ModulesLoaded", "every IPVS module is loaded and declared.")
	eventually(t, 5*time.Second, "the Normal Event", func() bool {
		for _, e := range nodeEvents(t, admin, "node-a", "IPVSModulesMissing") {
			if e.Type == "Normal" && e.Reason == "ModulesLoaded" {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second)
	if n := len(nodeEvents(t, admin, "node-a", "IPVSModulesMissing")); n != 2 {
		t.Errorf("events after recovery = %d, want 2", n)
	}

	// kubelet's Ready survived every patch untouched.
	r := nodeCondition(t, admin, "node-a", "Ready")
	if r == nil || r.Status != kubeletReady.Status || r.Reason != kubeletReady.Reason ||
		!r.LastHeartbeatTime.Equal(&kubeletReady.LastHeartbeatTime) || !r.LastTransitionTime.Equal(&kubeletReady.LastTransitionTime) {
		t.Errorf("kubelet's Ready changed: %+v", r)
	}
}

func TestAgentDisabledCheckRemovesCondition(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	createNode(t, admin, "node-a")
	all := allFakeChecks()
	u := startAgent(t, s, "node-a", agentOptions{checks: all, resync: time.Second})
	eventually(t, 10*time.Second, "LoadBalancerARPFailing published", func() bool {
		return nodeCondition(t, admin, "node-a", string(nodestatus.LoadBalancerARPFailing)) != nil
	})
	u.stop(t)

	// The same node, the ARP check now disabled (e.g. arp.enabled=false in the chart).
	startAgent(t, s, "node-a", agentOptions{checks: without(all, check.NameARP), resync: time.Second})
	eventually(t, 10*time.Second, "LoadBalancerARPFailing removed", func() bool {
		return nodeCondition(t, admin, "node-a", string(nodestatus.LoadBalancerARPFailing)) == nil
	})
	for _, ct := range []string{"Ready", string(nodestatus.IPVSModulesMissing), string(nodestatus.StrictARPDisabled)} {
		if nodeCondition(t, admin, "node-a", ct) == nil {
			t.Errorf("%s was removed too", ct)
		}
	}
}

func TestAgentSurvivesAPIServerOutage(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	createNode(t, admin, "node-a")
	checks := allFakeChecks()
	// The modules check "remediates" on every run: a file write stands for the module load.
	marker := filepath.Join(t.TempDir(), "remediations")
	checks[0].onRun = func() {
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprintln(f, time.Now().Format(time.RFC3339Nano))
			f.Close()
		}
	}
	const resync = time.Second
	u := startAgent(t, s, "node-a", agentOptions{checks: checks, resync: resync})
	eventually(t, 10*time.Second, "conditions published", func() bool {
		return nodeCondition(t, admin, "node-a", string(nodestatus.StrictARPDisabled)) != nil
	})

	s.StopAPIServer()
	stoppedAt := time.Now()
	runsAtStop := checks[0].runs.Load()
	// During the outage strictARP drifts.
	named(t, checks, check.NameARPSysctls).set(check.StatusProblem, "ArpIgnoreNotStrict", "net.ipv4.conf.all.arp_ignore is 0, strictARP needs 1.")
	time.Sleep(30 * time.Second)
	ranDuringOutage := checks[0].runs.Load() - runsAtStop
	if ranDuringOutage < 20 {
		t.Errorf("checks ran %d times during a 30 s outage with a %s resync; want them to go on", ranDuringOutage, resync)
	}
	b, _ := os.ReadFile(marker)
	var during int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if ts, err := time.Parse(time.RFC3339Nano, line); err == nil && ts.After(stoppedAt) {
			during++
		}
	}
	if during < 20 {
		t.Errorf("remediation ran %d times during the outage", during)
	}
	select {
	case <-u.done:
		t.Fatal("agent stopped during the outage")
	default:
	}

	if err := s.StartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	eventually(t, resync+5*time.Second, "status caught up", func() bool {
		c := nodeCondition(t, admin, "node-a", string(nodestatus.StrictARPDisabled))
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "ArpIgnoreNotStrict"
	})
	t.Logf("status caught up %s after the API server was ready again (resync %s)", time.Since(restarted).Round(time.Millisecond), resync)
	if last, err := u.mgr.LastSync(); err != nil || last.Before(stoppedAt.Add(30*time.Second)) {
		t.Errorf("publisher LastSync = %v, %v", last, err)
	}
}

func TestManagerRetriesConflictAgainstAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	stale := createNode(t, admin, "node-a")
	// Another writer changes the Node after our (cached) read.
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-a", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"other-writer":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	log := &apiservertest.RequestLog{}
	cs := apiservertest.AgentClient(t, log.Wrap(s.AdminConfig()))
	m, err := nodestatus.NewManager(nodestatus.ManagerConfig{NodeName: "node-a", Client: nodestatus.NewClient(cs),
		CachedNode: func() (*corev1.Node, error) { return stale, nil }})
	if err != nil {
		t.Fatal(err)
	}
	m.SetConditions([]nodestatus.Condition{{Type: nodestatus.IPVSModulesMissing, Status: nodestatus.StatusFalse, Reason: "ModulesLoaded", Message: "ok."}})
	if err := m.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	want := []string{
		"PATCH /api/v1/nodes/node-a/status Conflict",
		"PATCH /api/v1/nodes/node-a/status OK",
	}
	if diff := cmp.Diff(want, log.Writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	n, _ := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if n.Labels["other-writer"] != "yes" || nodeCondition(t, admin, "node-a", string(nodestatus.IPVSModulesMissing)) == nil {
		t.Errorf("after the retry: labels %v, conditions %v", n.Labels, n.Status.Conditions)
	}
}

func TestClusterViewAgainstAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		createNode(t, admin, name)
	}
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-b", "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"ipvs-guard.io/macs":"{\"eth0\":\"02:00:00:00:00:0b\"}"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	svc, err := admin.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	if _, err := admin.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := startAgent(t, s, "node-a", agentOptions{checks: allFakeChecks(), resync: time.Second,
		macs: func() (map[string]string, error) { return map[string]string{"eth0": "02:00:00:00:00:0a"}, nil }})
	v := u.agent.View()
	eventually(t, 10*time.Second, "LB ingress in the view", func() bool {
		ips, err := v.LoadBalancerIngresses()
		return err == nil && len(ips) == 1
	})
	ips, _ := v.LoadBalancerIngresses()
	if ips[0].IP.String() != "192.0.2.10" || ips[0].Service.String() != "default/web" {
		t.Errorf("ingress = %+v", ips[0])
	}
	// Without a peers Service the peers are this node alone; node-b's MAC
	// is named by reading Node metadata on demand (no Node is watched).
	if peers, err := v.Peers(); err != nil || !cmp.Equal(peers, []string{"node-a"}) {
		t.Errorf("peers = %v, %v; want node-a alone", peers, err)
	}
	mac, _ := parseMAC("02:00:00:00:00:0B")
	if n, ok := v.MACDirectory().NodeForMAC(ctx, mac, true); !ok || n != "node-b" {
		t.Errorf("NodeForMAC = %q %v", n, ok)
	}
	raw, _ := json.Marshal(ips)
	t.Logf("view: %s", raw)
}

// TestClusterViewServiceL2Status installs MetalLB's real CRD after the agent
// started: the next resync discovers it, and the announcing node and
// interfaces of each LoadBalancer IP come from its ServiceL2Status.
func TestClusterViewServiceL2Status(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	createNode(t, admin, "node-a")
	svc, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	if _, err := admin.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := startAgent(t, s, "node-a", agentOptions{checks: allFakeChecks(), resync: 500 * time.Millisecond, metallb: true})
	v := u.agent.View()
	eventually(t, 10*time.Second, "view synced", v.HasSynced)
	if v.HasServiceL2Status() {
		t.Fatal("ServiceL2Status watched before its CRD exists")
	}

	if err := s.Apply(ctx, filepath.Join("testdata", "metallb.io_servicel2statuses.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "CRD discovered on a resync", v.HasServiceL2Status)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(s.AdminConfig())
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
		"metadata": map[string]any{"name": "l2-abcde", "namespace": "metallb-system", "labels": map[string]any{
			"metallb.io/node": "node-b", "metallb.io/service-name": "web", "metallb.io/service-namespace": "default"}},
	}}
	created, err := dyn.Resource(clusterview.ServiceL2StatusGVR).Namespace("metallb-system").Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{"node": "node-b", "serviceName": "web", "serviceNamespace": "default",
		"interfaces": []any{map[string]any{"name": "eth0"}}}
	if _, err := dyn.Resource(clusterview.ServiceL2StatusGVR).Namespace("metallb-system").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "announcer in the view", func() bool {
		ips, err := v.LoadBalancerIngresses()
		return err == nil && len(ips) == 1 && ips[0].AnnouncingNode == "node-b"
	})
	ips, _ := v.LoadBalancerIngresses()
	if diff := cmp.Diff([]string{"eth0"}, ips[0].AnnouncingInterfaces); diff != "" {
		t.Errorf("interfaces (-want +got):\n%s", diff)
	}
}

// TestSlowARPRoundDoesNotDelayModulesCondition: while the ARP check runs a
// long round (silent on-link IPs, up to its timeout), a modules-load.d edit
// reaches the API server as IPVSModulesMissing=True within a bound, both
// ways, and at steady state with every condition False nothing is written.
func TestSlowARPRoundDoesNotDelayModulesCondition(t *testing.T) {
	const bound = 2 * time.Second
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	createNode(t, admin, "node-a")
	checks := allFakeChecks()
	modules, arp := named(t, checks, check.NameModules), named(t, checks, check.NameARP)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// Every ARP run after the first takes 30 s: rounds back to back.
	arp.onRun = func() {
		if arp.runs.Load() > 0 {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
	}
	dir := t.TempDir()
	decl := filepath.Join(dir, "ipvs.conf")
	u := startAgent(t, s, "node-a", agentOptions{checks: checks, resync: 200 * time.Millisecond, dirs: []string{dir}})
	eventually(t, 10*time.Second, "every condition False", func() bool {
		for _, ct := range nodestatus.AllConditionTypes() {
			if c := nodeCondition(t, admin, "node-a", string(ct)); c == nil || c.Status != corev1.ConditionFalse {
				return false
			}
		}
		return true
	})
	eventually(t, 5*time.Second, "an ARP round under way", func() bool { return arp.runs.Load() == 1 && modules.runs.Load() >= 3 })

	// Steady state, all False, while ARP runs: not a single write.
	time.Sleep(300 * time.Millisecond)
	before := u.log.Writes()
	runs := modules.runs.Load()
	eventually(t, 10*time.Second, "10 modules resyncs during the ARP round", func() bool { return modules.runs.Load() >= runs+10 })
	if diff := cmp.Diff(before, u.log.Writes()); diff != "" {
		t.Errorf("writes at steady state (-before +after):\n%s", diff)
	}

	for i, step := range []struct {
		status check.Status
		want   corev1.ConditionStatus
	}{{check.StatusProblem, corev1.ConditionTrue}, {check.StatusOK, corev1.ConditionFalse}} {
		modules.set(step.status, "R"+string(step.status), "modules "+string(step.status)+".")
		start := time.Now()
		if err := os.WriteFile(decl, []byte(fmt.Sprintf("ip_vs\n# %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		for {
			if c := nodeCondition(t, admin, "node-a", string(nodestatus.IPVSModulesMissing)); c != nil && c.Status == step.want {
				break
			}
			if time.Since(start) > bound {
				t.Fatalf("IPVSModulesMissing not %s on the API server within %s while an ARP round ran", step.want, bound)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("modules-load.d edit -> IPVSModulesMissing=%s on the API server: %s", step.want, time.Since(start).Round(time.Millisecond))
	}
	if n := arp.runs.Load(); n != 1 {
		t.Errorf("the ARP check finished %d runs, want 1 (its round still under way)", n)
	}
}

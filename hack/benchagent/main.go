// SPDX-License-Identifier: Apache-2.0

// Command benchagent measures the real `ipvs-guard run` binary against a real
// kube-apiserver (internal/apiservertest), running as the least-privilege
// ServiceAccount of deploy/rbac with a pod-bound token:
//
//   - drift-to-condition latency: from a modules-load.d edit (inotify) and
//     from a module removal (the host root's /proc/modules edited plus a
//     synthetic kernel uevent, as this machine's kernel has no modules) to
//     IPVSModulesMissing flipping on the API server, both directions;
//   - idle RSS and CPU with N LoadBalancer Services in the informer cache;
//   - API writes at steady state, from the API server's audit log.
//
// It needs root (uevents are multicast with CAP_NET_ADMIN). Run it through
// hack/bench-agent.sh.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/agent"
)

const (
	node     = "bench-node"
	auditPol = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
`
	agentUser = "system:serviceaccount:ipvs-guard:ipvs-guard"
)

var want = []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}

func main() {
	var (
		binary   = flag.String("binary", "bin/ipvs-guard", "ipvs-guard binary")
		hostTree = flag.String("host-tree", "pkg/modules/testdata/debian12", "captured host tree copied as the agent's --root")
		services = flag.Int("services", 1000, "LoadBalancer Services in the cluster")
		trials   = flag.Int("trials", 20, "latency trials per path and direction")
		idle     = flag.Duration("idle", 60*time.Second, "idle window for RSS, CPU and writes")
		spacing  = flag.Duration("spacing", time.Second, "pause after each latency trial")
		resync   = flag.Duration("resync-period", time.Minute, "the agent's --resync-period (short: ARP rounds run back to back)")

		scale   = flag.Bool("scale", false, "the scale run instead: simulated nodes, churn, many agents (hack/bench-scale.sh)")
		nodes   = flag.Int("nodes", 1000, "scale: simulated Nodes")
		agents  = flag.Int("agents", 20, "scale: real agents, on the first nodes")
		churn   = flag.Float64("churn", 1, "scale: Services created (and as many deleted and scaled) per second")
		window  = flag.Duration("window", 2*time.Minute, "scale: each measurement window (baseline, then with agents)")
		status  = flag.Duration("status-period", 5*time.Minute, "scale: each simulated kubelet's node status report period")
		maxRSS  = flag.Float64("max-rss-mib", 0, "scale: fail when an agent's RSS exceeds this (0: no limit)")
		heap    = flag.String("heap-profile", "", "scale: save agent 0's heap profile (pprof) to this file after the window")
		keep    = flag.Bool("keep", false, "scale: keep the work directory (API server, audit and agent logs) also when the run passes")
		rollout = flag.Float64("rollouts", 0, "scale: besides the churn, endpoints of long-lived Services replaced per second (a rollout's pods: the change stays, unlike the churn's scale-up of a Service deleted a second later)")
		mode    = flag.String("proxy-mode", "ipvs", "scale: the agents' kube-proxy: ipvs (none runs; the agents' host trees are IPVS nodes) or nftables (the real kube-proxy in nftables mode, in the private network namespace hack/bench-scale.sh -proxy-mode nftables runs the bench in)")
		kpBin   = flag.String("kube-proxy", "", "scale, -proxy-mode nftables: the kube-proxy binary")
	)
	flag.Parse()
	trialSpacing = *spacing
	if *scale {
		if err := runScale(scaleOptions{binary: *binary, hostTree: *hostTree, nodes: *nodes, services: *services, agents: *agents,
			churnPerSecond: *churn, window: *window, statusPeriod: *status, maxRSSMiB: *maxRSS, keep: *keep, heapProfile: *heap,
			proxyMode: *mode, kubeProxy: *kpBin, rolloutPerSecond: *rollout}); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*binary, *hostTree, *services, *trials, *idle, *resync); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(binary, hostTree string, nSvc, trials int, idle, resync time.Duration) error {
	ctx := context.Background()
	work, err := os.MkdirTemp("", "bench-agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	s, err := apiservertest.StartServer(ctx, apiservertest.Options{Dir: filepath.Join(work, "api"), AuditPolicy: auditPol})
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := s.AdminConfig()
	cfg.QPS, cfg.Burst = 1000, 1000
	admin := kubernetes.NewForConfigOrDie(cfg)

	// deploy/rbac/rbac.yaml carries the Role that reads MetalLB's state in
	// its namespace, which must exist (as with MetalLB installed).
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the metallb-system namespace: %w", err)
	}
	rbac := filepath.Join("deploy", "rbac")
	if err := s.Apply(ctx, filepath.Join(rbac, "serviceaccount.yaml"), filepath.Join(rbac, "rbac.yaml"), filepath.Join(rbac, "admission-policy.yaml")); err != nil {
		return err
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	t0 := time.Now()
	if err := createServices(ctx, admin, nSvc); err != nil {
		return err
	}
	fmt.Printf("created %d LoadBalancer Services with ingress IPs in %s\n", nSvc, time.Since(t0).Round(time.Millisecond))
	token, err := podToken(ctx, admin)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(work, "agent.kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig, token); err != nil {
		return err
	}

	root := filepath.Join(work, "root")
	if err := exec.Command("cp", "-a", hostTree, root).Run(); err != nil {
		return fmt.Errorf("copying %s: %w", hostTree, err)
	}
	healthy, err := makeHealthy(root)
	if err != nil {
		return err
	}

	cmd := exec.Command(binary, "run", "--kubeconfig", kubeconfig, "--node-name", node, "--root", root,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:0", "--resync-period", resync.String(), "-v", "4")
	logf, _ := os.Create(filepath.Join(work, "agent.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	started := time.Now()

	cond := newCondWatcher(ctx, admin)
	if err := cond.waitFor("False", 60*time.Second); err != nil {
		out, _ := os.ReadFile(filepath.Join(work, "agent.log"))
		return fmt.Errorf("agent never reported healthy modules: %w\n%s", err, tail(string(out), 30))
	}
	fmt.Printf("agent start to IPVSModulesMissing=False on the API server: %s\n", time.Since(started).Round(time.Millisecond))

	var spans []span
	declIn, declOut, err := declTrials(cond, &spans, root, healthy, trials)
	if err != nil {
		return err
	}
	modIn, modOut, err := ueventTrials(cond, &spans, root, healthy, trials)
	if err != nil {
		return err
	}
	fmt.Printf("\ndrift-to-condition latency on the API server, %d trials each (resync period %s; every flip is event-driven):\n", trials, resync)
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{
		{"modules-load.d edit (inotify) -> True ", declIn}, {"modules-load.d restore (inotify) -> False", declOut},
		{"module removed (uevent) -> True      ", modIn}, {"module loaded (uevent) -> False       ", modOut},
	} {
		fmt.Printf("  %s  p50 %6.1f ms  p95 %6.1f ms  max %6.1f ms\n", r.name, ms(pct(r.d, 50)), ms(pct(r.d, 95)), ms(pct(r.d, 100)))
	}
	if err := breakdown(spans, filepath.Join(work, "agent.log"), s.AuditLog); err != nil {
		return err
	}
	if err := arpRounds(spans, filepath.Join(work, "agent.log")); err != nil {
		return err
	}

	return idleCost(s.AuditLog, cmd.Process.Pid, idle, nSvc)
}

// declTrials times, trials times, the modules condition turning True when
// ip_vs_sh leaves the declaration file, and False when it is restored: the
// inotify path.
func declTrials(cond *condWatcher, spans *[]span, root string, healthy healthyState, trials int) (in, out []time.Duration, err error) {
	decl := filepath.Join(root, "etc/modules-load.d/ipvs.conf")
	for i := range trials {
		broken := strings.ReplaceAll(healthy.decl, "ip_vs_sh\n", "")
		d, err := flip(cond, "True", spans, pathInotify, func() error { return writeAtomic(decl, broken) })
		if err != nil {
			return nil, nil, fmt.Errorf("decl trial %d: %w", i, err)
		}
		in = append(in, d)
		if d, err = flip(cond, "False", spans, pathInotify, func() error { return writeAtomic(decl, healthy.decl) }); err != nil {
			return nil, nil, fmt.Errorf("decl trial %d (restore): %w", i, err)
		}
		out = append(out, d)
	}
	return in, out, nil
}

// ueventTrials times, trials times, the modules condition turning True when
// ip_vs_sh leaves /proc/modules with a remove uevent, and False when it
// comes back with an add uevent: the uevent path.
func ueventTrials(cond *condWatcher, spans *[]span, root string, healthy healthyState, trials int) (in, out []time.Duration, err error) {
	procModules := filepath.Join(root, "proc/modules")
	for i := range trials {
		var without []string
		for _, l := range strings.SplitAfter(healthy.proc, "\n") {
			if !strings.HasPrefix(l, "ip_vs_sh ") {
				without = append(without, l)
			}
		}
		d, err := flip(cond, "True", spans, pathUevent, func() error {
			if err := os.WriteFile(procModules, []byte(strings.Join(without, "")), 0o644); err != nil {
				return err
			}
			return agent.SendModuleUevent(agent.ModuleEvent{Action: "remove", Module: "ip_vs_sh"}, 1000+2*i)
		})
		if err != nil {
			return nil, nil, fmt.Errorf("uevent trial %d: %w", i, err)
		}
		in = append(in, d)
		d, err = flip(cond, "False", spans, pathUevent, func() error {
			if err := os.WriteFile(procModules, []byte(healthy.proc), 0o644); err != nil {
				return err
			}
			return agent.SendModuleUevent(agent.ModuleEvent{Action: "add", Module: "ip_vs_sh"}, 1001+2*i)
		})
		if err != nil {
			return nil, nil, fmt.Errorf("uevent trial %d (restore): %w", i, err)
		}
		out = append(out, d)
	}
	return in, out, nil
}

// idleCost prints the agent's (process pid) RSS, CPU and API writes over
// idle with nSvc LoadBalancer Services cached.
func idleCost(auditLog string, pid int, idle time.Duration, nSvc int) error {
	time.Sleep(5 * time.Second) // let the last event settle
	writesBefore, err := agentWrites(auditLog)
	if err != nil {
		return err
	}
	cpu0, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	w0 := time.Now()
	time.Sleep(idle)
	cpu1, _ := cpuTicks(pid)
	window := time.Since(w0)
	writesAfter, _ := agentWrites(auditLog)
	rss, hwm := rssKiB(pid)
	millicores := float64(cpu1-cpu0) / 100 / window.Seconds() * 1000 // USER_HZ = 100
	fmt.Printf("\nidle over %s with %d LoadBalancer Services cached (one resync in the window):\n", window.Round(time.Second), nSvc)
	fmt.Printf("  RSS %.1f MiB (peak %.1f MiB), CPU %.2f millicores\n", float64(rss)/1024, float64(hwm)/1024, millicores)
	n := len(writesAfter) - len(writesBefore)
	fmt.Printf("  API writes by the agent in the window: %d  => %.0f per node per hour\n", n, float64(n)*float64(time.Hour)/float64(window))
	fmt.Printf("  API writes by the agent over the whole run: %d (%s)\n", len(writesAfter), summarize(writesAfter))
	return nil
}

type healthyState struct{ decl, proc string }

// makeHealthy declares and "loads" the wanted modules in the copied host tree.
func makeHealthy(root string) (healthyState, error) {
	decl := "# bench\n" + strings.Join(want, "\n") + "\n"
	if err := writeAtomic(filepath.Join(root, "etc/modules-load.d/ipvs.conf"), decl); err != nil {
		return healthyState{}, err
	}
	pm := filepath.Join(root, "proc/modules")
	b, err := os.ReadFile(pm)
	if err != nil {
		return healthyState{}, err
	}
	proc := string(b)
	for _, m := range want {
		if !strings.Contains(proc, "\n"+m+" ") && !strings.HasPrefix(proc, m+" ") {
			proc += fmt.Sprintf("%s 204800 0 - Live 0x0000000000000000\n", m)
		}
	}
	return healthyState{decl: decl, proc: proc}, os.WriteFile(pm, []byte(proc), 0o644)
}

func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func createServices(ctx context.Context, cs kubernetes.Interface, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lb-%04d", i), Namespace: "default",
					Annotations: map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "bench"}},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
			}
			if n > 2000 {
				// The NodePort range (30000-32767) holds fewer.
				svc.Spec.AllocateLoadBalancerNodePorts = ptr(false)
			}
			svc, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), IPMode: ptr(corev1.LoadBalancerIPModeVIP)}}
			if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func ptr[T any](v T) *T { return &v }

func podToken(ctx context.Context, cs kubernetes.Interface) (string, error) {
	pod, err := cs.CoreV1().Pods("ipvs-guard").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ipvs-guard-bench"},
		Spec: corev1.PodSpec{ServiceAccountName: "ipvs-guard", NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "agent", Image: "ipvs-guard:bench"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	exp := int64(24 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts("ipvs-guard").CreateToken(ctx, "ipvs-guard", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp, BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// condWatcher follows IPVSModulesMissing on the bench Node with a watch.
type condWatcher struct {
	mu      sync.Mutex
	status  string
	changed chan struct{}
}

func newCondWatcher(ctx context.Context, cs kubernetes.Interface) *condWatcher {
	c := &condWatcher{changed: make(chan struct{}, 1)}
	go func() {
		for ctx.Err() == nil {
			w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				n := ev.Object.(*corev1.Node)
				for _, cd := range n.Status.Conditions {
					if cd.Type == "IPVSModulesMissing" {
						c.mu.Lock()
						c.status = string(cd.Status)
						c.mu.Unlock()
						select {
						case c.changed <- struct{}{}:
						default:
						}
					}
				}
			}
		}
	}()
	return c
}

func (c *condWatcher) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

func (c *condWatcher) waitFor(status string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for c.get() != status {
		select {
		case <-c.changed:
		case <-deadline:
			return fmt.Errorf("IPVSModulesMissing still %q after %s, want %q", c.get(), timeout, status)
		}
	}
	return nil
}

// span is one latency trial: the drift made at start, the condition seen on
// the watch at end.
type span struct {
	path       string
	start, end time.Time
}

const (
	pathInotify = "inotify"
	pathUevent  = "uevent"
)

// trialSpacing separates trials (-spacing). Each flip costs the agent up
// to two requests (the status patch and its Event); client-go's token bucket
// (5 QPS, burst 10) refills one token per 200 ms, so 1 s between flips keeps
// it full and the rate limiter out of what is measured.
var trialSpacing = time.Second

// flip runs act and returns how long until the condition shows status.
func flip(c *condWatcher, status string, spans *[]span, path string, act func() error) (time.Duration, error) {
	start := time.Now()
	if err := act(); err != nil {
		return 0, err
	}
	if err := c.waitFor(status, 30*time.Second); err != nil {
		return 0, err
	}
	end := time.Now()
	*spans = append(*spans, span{path: path, start: start, end: end})
	time.Sleep(trialSpacing)
	return end.Sub(start), nil
}

// breakdown splits each trial into stages from the agent's own log
// timestamps (-v 4) and the audit log: drift made → event seen by the agent
// → check done → patch received by the API server → stored (response
// complete) → delivered on the benchmark's watch.
func breakdown(spans []span, agentLog, auditLog string) error {
	seen, checked, err := agentStamps(agentLog)
	if err != nil {
		return err
	}
	recv, stored, err := patchStamps(auditLog)
	if err != nil {
		return err
	}
	stages := []string{"drift -> event seen by the agent", "event seen -> check done", "check done -> patch received",
		"patch received -> stored", "stored -> on the watch"}
	fmt.Printf("\nper stage, p50 / p95 / max in ms (agent log timestamps, audit log request received / response complete):\n")
	for _, path := range []string{pathInotify, pathUevent} {
		per := make([][]time.Duration, len(stages))
		n := 0
		for _, sp := range spans {
			if sp.path != path {
				continue
			}
			t1, ok1 := first(seen[path], sp.start, sp.end)
			t2, ok2 := first(checked, t1, sp.end)
			i3, ok3 := firstIndex(recv, t2, sp.end)
			if !ok1 || !ok2 || !ok3 {
				continue
			}
			n++
			ts := []time.Time{sp.start, t1, t2, recv[i3], stored[i3], sp.end}
			for i := range stages {
				per[i] = append(per[i], ts[i+1].Sub(ts[i]))
			}
		}
		fmt.Printf("  %s (%d of %d trials matched):\n", path, n, countPath(spans, path))
		for i, st := range stages {
			if len(per[i]) > 0 {
				fmt.Printf("    %-36s %7.1f / %7.1f / %7.1f\n", st, ms(pct(per[i], 50)), ms(pct(per[i], 95)), ms(pct(per[i], 100)))
			}
		}
	}
	return nil
}

func countPath(spans []span, path string) int {
	n := 0
	for _, sp := range spans {
		if sp.path == path {
			n++
		}
	}
	return n
}

// first returns the first time in ts (sorted) within [from, to].
func first(ts []time.Time, from, to time.Time) (time.Time, bool) {
	i, ok := firstIndex(ts, from, to)
	if !ok {
		return time.Time{}, false
	}
	return ts[i], true
}

func firstIndex(ts []time.Time, from, to time.Time) (int, bool) {
	i, _ := slices.BinarySearchFunc(ts, from, func(a, b time.Time) int { return a.Compare(b) })
	if i < len(ts) && !ts[i].After(to) {
		return i, true
	}
	return 0, false
}

// agentStamps reads the agent's klog lines: when it saw each event and when
// the modules check finished.
func agentStamps(path string) (seen map[string][]time.Time, checked []time.Time, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	seen = map[string][]time.Time{}
	year := time.Now().Year()
	for _, line := range strings.Split(string(b), "\n") {
		// I1123 07:05:38.199416   16391 agent.go:295] "…"
		if len(line) < 21 {
			continue
		}
		t, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, line[1:21]), time.Local)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(line, `"modules-load.d changed"`):
			seen[pathInotify] = append(seen[pathInotify], t)
		case strings.Contains(line, `"Module uevent"`):
			seen[pathUevent] = append(seen[pathUevent], t)
		case strings.Contains(line, `"Check ran"`) && strings.Contains(line, `check="modules"`):
			checked = append(checked, t)
		}
	}
	return seen, checked, nil
}

// arpRounds reports the ARP check's runs during the latency trials, from the
// agent's "Check ran" lines (logged when a run ends, with its duration):
// how many, how long, how much of the trials' time one was under way, and
// how many trials started while one was.
func arpRounds(spans []span, agentLog string) error {
	if len(spans) == 0 {
		return nil
	}
	b, err := os.ReadFile(agentLog)
	if err != nil {
		return err
	}
	from, to := spans[0].start, spans[len(spans)-1].end
	type round struct{ start, end time.Time }
	var rounds []round
	var durs []time.Duration
	year := time.Now().Year()
	for _, line := range strings.Split(string(b), "\n") {
		if len(line) < 21 || !strings.Contains(line, `"Check ran"`) || !strings.Contains(line, `check="arp"`) {
			continue
		}
		end, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, line[1:21]), time.Local)
		if err != nil {
			continue
		}
		_, v, ok := strings.Cut(line, ` duration="`)
		if !ok {
			continue
		}
		v, _, _ = strings.Cut(v, `"`)
		d, err := time.ParseDuration(v)
		if err != nil {
			continue
		}
		r := round{end.Add(-d), end}
		if r.end.Before(from) || r.start.After(to) {
			continue
		}
		rounds = append(rounds, r)
		durs = append(durs, d)
	}
	fmt.Printf("\nARP rounds during the trials (%s):\n", to.Sub(from).Round(time.Second))
	if len(rounds) == 0 {
		fmt.Printf("  none (no LoadBalancer IP to probe, or no ARP check)\n")
		return nil
	}
	var busy time.Duration
	for _, r := range rounds {
		busy += minTime(r.end, to).Sub(maxTime(r.start, from))
	}
	during := 0
	for _, sp := range spans {
		for _, r := range rounds {
			if !sp.start.Before(r.start) && sp.start.Before(r.end) {
				during++
				break
			}
		}
	}
	fmt.Printf("  %d rounds, duration p50 %.1f s, max %.1f s; a round under way %.0f%% of the time\n",
		len(rounds), pct(durs, 50).Seconds(), pct(durs, 100).Seconds(), 100*busy.Seconds()/to.Sub(from).Seconds())
	fmt.Printf("  %d of %d trials started while a round was under way\n", during, len(spans))
	return nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// patchStamps reads when the API server received and completed each of the
// agent's Node status patches.
func patchStamps(auditLog string) (recv, done []time.Time, err error) {
	b, err := os.ReadFile(auditLog)
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Verb      string                    `json:"verb"`
			User      struct{ Username string } `json:"user"`
			ObjectRef struct{ Resource, Subresource string }
			Received  time.Time `json:"requestReceivedTimestamp"`
			Stage     time.Time `json:"stageTimestamp"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || ev.User.Username != agentUser || ev.Verb != "patch" || ev.ObjectRef.Subresource != "status" {
			continue
		}
		recv = append(recv, ev.Received)
		done = append(done, ev.Stage)
	}
	return recv, done, nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s, nil
}

func rssKiB(pid int) (rss, hwm int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm
}

// agentWrites returns "verb resource/subresource" for every write the agent made.
func agentWrites(auditLog string) ([]string, error) {
	return auditWrites(auditLog, func(user, _ string) bool { return user == agentUser })
}

// auditWrites returns "verb resource/subresource" for every audited write
// whose user and user agent keep accepts.
func auditWrites(auditLog string, keep func(user, userAgent string) bool) ([]string, error) {
	f, err := os.Open(auditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb      string                    `json:"verb"`
			User      struct{ Username string } `json:"user"`
			UserAgent string                    `json:"userAgent"`
			ObjectRef struct {
				Resource, Subresource, Namespace string
			} `json:"objectRef"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !keep(ev.User.Username, ev.UserAgent) {
			continue
		}
		r := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			r += "/" + ev.ObjectRef.Subresource
		}
		out = append(out, ev.Verb+" "+r)
	}
	return out, sc.Err()
}

func summarize(ws []string) string {
	m := map[string]int{}
	for _, w := range ws {
		m[w]++
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

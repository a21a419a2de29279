// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/hosttreetest"
	"github.com/ipvs-guard/ipvs-guard/internal/peerstest"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// scaleOptions size the scale run.
type scaleOptions struct {
	binary, hostTree string
	nodes, services  int
	agents           int
	churnPerSecond   float64
	rolloutPerSecond float64 // endpoints replaced on long-lived Services per second (0: none)
	window           time.Duration
	statusPeriod     time.Duration
	maxRSSMiB        float64
	keep             bool   // keep the work directory (API server and agent logs) also when the run passes
	heapProfile      string // where to save agent 0's heap profile after the window
	profileAddr      string // where agent 0 serves /debug/pprof (with heapProfile)
	peersFlag        string // the agents' --peers-service argument
	proxyMode        string // the agents' kube-proxy: ipvs (none runs) or nftables (the real kube-proxy)
	kubeProxy        string // the kube-proxy binary (nftables mode)
}

// scaleAuditPolicy records every write; Node metadata patches with their
// body, to tell what a MAC annotation write changed, and Node status patches
// with body and response, to tell which condition a write changed and what
// the Node showed after it.
const scaleAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse
    verbs: ["patch"]
    resources: [{group: "", resources: ["nodes/status"]}]
  - level: Request
    verbs: ["patch"]
    resources: [{group: "", resources: ["nodes"]}]
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: Metadata
    verbs: ["get", "list"]
  - level: None
`

// runScale is the scale measurement: a real API server with simulated
// nodes (Node objects whose status is rewritten every statusPeriod, as
// kubelet's node status report does), LoadBalancer Services with
// EndpointSlices, and real `ipvs-guard run` agents on some of the nodes, each
// over its own copy of a host tree, all answered by one proxy-ARP responder.
// It measures a baseline window (churn, no agents) and a window with the
// agents, and fails when an agent wrote its Node during churn or its RSS
// exceeded maxRSSMiB.
func runScale(o scaleOptions) (err error) {
	if err := validateProxyMode(o); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	work, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return err
	}
	// Kept on failure (and with -keep): API server, audit and agent logs.
	defer func() {
		if o.keep || err != nil {
			fmt.Printf("work directory (kept): %s\n", work)
			return
		}
		_ = os.RemoveAll(work)
	}()
	s, err := apiservertest.StartServer(ctx, apiservertest.Options{Dir: filepath.Join(work, "api"), AuditPolicy: scaleAuditPolicy})
	if err != nil {
		return err
	}
	defer s.Close()
	defer cancel() // stop the churn and the heartbeats before the server
	cfg := s.AdminConfig()
	cfg.QPS, cfg.Burst = 2000, 2000
	cfg.UserAgent = "bench-scale"
	admin := kubernetes.NewForConfigOrDie(cfg)
	apiPID, etcdPID := s.PIDs()

	responder, err := newARPResponder()
	if err != nil {
		return err
	}
	defer responder.close()

	if o.peersFlag, err = populate(ctx, admin, o); err != nil {
		return err
	}

	server := []int{apiPID, etcdPID}
	if o.proxyMode == proxyModeNFTables {
		// Started before the baseline: its watches and reads are in both
		// windows, and only the agents' difference is reported.
		kp, err := startKubeProxy(ctx, o.kubeProxy, s.Kubeconfig, work, o.services)
		defer kp.stop()
		if err != nil {
			return err
		}
		server = append(server, kp.pid())
	}

	go heartbeats(ctx, admin, o.nodes, o.statusPeriod)
	ch := &churner{cs: admin, next: o.services}
	go ch.run(ctx, o.churnPerSecond)
	go ch.rollouts(ctx, o.rolloutPerSecond, o.services)

	fmt.Printf("\nbaseline: %d simulated kubelets (status every %s), churn %.1f Services/s (create + delete + endpoint scale-up each), no agent\n",
		o.nodes, o.statusPeriod, o.churnPerSecond)
	churn0, churnT0 := ch.done.Load(), time.Now()
	base, err := measure(ctx, admin, s.AuditLog, o.window, server, nil)
	if err != nil {
		return err
	}
	fmt.Printf("churn achieved in the baseline window: %.2f Services/s\n", float64(ch.done.Load()-churn0)/time.Since(churnT0).Seconds())

	if o.heapProfile != "" {
		ports, err := apiservertest.FreePorts(1)
		if err != nil {
			return err
		}
		o.profileAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	}
	agentsStarted := time.Now()
	agents, err := startAgents(o, s, work)
	defer func() {
		for _, a := range agents {
			_ = a.Process.Signal(os.Interrupt)
		}
		for _, a := range agents {
			_ = a.Wait()
		}
	}()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := waitAllFalse(ctx, admin, o.agents, 5*time.Minute); err != nil {
		return err
	}
	fmt.Printf("%d agents started; every condition False on their Nodes after %s\n", o.agents, time.Since(t0).Round(time.Second))
	if err := printConditions(ctx, admin, simNode(0)); err != nil {
		return err
	}
	time.Sleep(15 * time.Second) // first resyncs, MAC annotations, Events settle

	var pids []int
	for _, a := range agents {
		pids = append(pids, a.Process.Pid)
	}
	churn0, churnT0 = ch.done.Load(), time.Now()
	with, err := measure(ctx, admin, s.AuditLog, o.window, server, pids)
	if err != nil {
		return err
	}
	if o.heapProfile != "" {
		if err := saveHeapProfile(o.profileAddr, o.heapProfile); err != nil {
			return err
		}
		fmt.Printf("agent 0's heap profile: %s (go tool pprof -top -sample_index=inuse_space)\n", o.heapProfile)
	}
	if len(with.nodeWrites) > 0 {
		explainWrites(s.AuditLog, work, o.agents, agentsStarted, with.start)
	}
	if err := waitAllFalse(ctx, admin, o.agents, time.Second); err != nil {
		return fmt.Errorf("after the churn window: %w", err)
	}
	fmt.Printf("churn achieved in the window with agents: %.2f Services/s (each: one created, one deleted, one EndpointSlice scaled)\n", float64(ch.done.Load()-churn0)/time.Since(churnT0).Seconds())
	if o.rolloutPerSecond > 0 {
		fmt.Printf("rollouts: %d endpoints of long-lived Services replaced since the start\n", ch.rolled.Load())
	}
	if err := printConditions(ctx, admin, simNode(0)); err != nil {
		return err
	}
	if err := reportFullComparison(ctx, s.AdminConfig(), o.churnPerSecond, o.proxyMode); err != nil {
		return err
	}
	return report(o, base, with)
}

// populate creates the simulated Nodes, the agents' peers Service over all
// of them and the LoadBalancer Services with their EndpointSlices; it
// returns the agents' --peers-service argument.
func populate(ctx context.Context, admin kubernetes.Interface, o scaleOptions) (string, error) {
	t0 := time.Now()
	if err := parallel(o.nodes, func(i int) error { return createSimNode(ctx, admin, i) }); err != nil {
		return "", fmt.Errorf("creating nodes: %w", err)
	}
	fmt.Printf("created %d Nodes (Ready, 20 images each) in %s\n", o.nodes, time.Since(t0).Round(time.Millisecond))
	// Every node runs ipvs-guard, as the chart's DaemonSet would: the peers
	// Service's EndpointSlices list all of them, so the ARP probes are
	// sharded over every node and each real agent probes its share only.
	allNodes := make([]string, o.nodes)
	for i := range allNodes {
		allNodes[i] = simNode(i)
	}
	peers, err := peerstest.Publish(ctx, admin, types.NamespacedName{Namespace: "ipvs-guard", Name: "ipvs-guard-peers"}, allNodes)
	if err != nil {
		return "", err
	}
	t0 = time.Now()
	if err := parallel(o.services, func(i int) error { return createLBService(ctx, admin, i) }); err != nil {
		return "", fmt.Errorf("creating Services: %w", err)
	}
	fmt.Printf("created %d LoadBalancer Services with ingress IPs and EndpointSlices in %s\n", o.services, time.Since(t0).Round(time.Millisecond))
	return peers.Flag(), nil
}

// rssSplitKiB returns a process's RssAnon and RssFile.
func rssSplitKiB(pid int) (anon, file int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "RssAnon":
			anon = n
		case "RssFile":
			file = n
		}
	}
	return anon, file
}

// saveHeapProfile saves agent 0's heap profile (after a GC), served on
// profileAddr, to path.
func saveHeapProfile(profileAddr, path string) error {
	resp, err := http.Get("http://" + profileAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return fmt.Errorf("reading agent 0's heap profile: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading agent 0's heap profile: %s: %w", resp.Status, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	// The runtime's own account (debug=1 ends with runtime.MemStats).
	resp, err = http.Get("http://" + profileAddr + "/debug/pprof/heap?debug=1")
	if err != nil {
		return fmt.Errorf("reading agent 0's memory statistics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fmt.Printf("agent 0's runtime memory statistics (MiB):")
	var gcs string
	for sc.Scan() {
		for _, k := range []string{"HeapAlloc", "HeapInuse", "HeapIdle", "HeapReleased", "Stack", "GCSys", "OtherSys", "Sys", "NextGC"} {
			if v, ok := strings.CutPrefix(sc.Text(), "# "+k+" = "); ok {
				n, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				fmt.Printf(" %s %.1f", k, n/(1<<20))
			}
		}
		// The garbage collector's share of the agent's CPU since it started.
		for _, k := range []string{"NumGC", "GCCPUFraction"} {
			if v, ok := strings.CutPrefix(sc.Text(), "# "+k+" = "); ok {
				gcs += fmt.Sprintf(" %s %s", k, v)
			}
		}
	}
	fmt.Printf(";%s\n", gcs)
	return sc.Err()
}

// explainWrites prints every Node status patch the agents sent since they
// started (those in the window marked), with its body, and the lines of
// their logs that say why a condition changed.
func explainWrites(auditLog, work string, agents int, started, window time.Time) {
	ps, err := agentStatusPatches(auditLog, started)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the audit log:", err)
		return
	}
	fmt.Printf("\nNode status patches by the agents since they started (* = in the churn window):\n")
	for _, p := range ps {
		mark := " "
		if !p.received.Before(window) {
			mark = "*"
		}
		fmt.Printf("%s %s +%6.1fs %s HTTP %d %s\n", mark, p.received.Format("15:04:05.000"), p.received.Sub(started).Seconds(), p.node, p.code, p.body)
	}
	for i := range agents {
		b, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("agent-%d.log", i)))
		if err != nil {
			continue
		}
		fmt.Printf("\nagent %d (%s), log lines about conditions:\n", i, simNode(i))
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "Condition changed") || strings.Contains(l, "Holding back") || strings.Contains(l, "Publishing") ||
				strings.Contains(l, "problem") || strings.Contains(l, "rror") || strings.Contains(l, "failed") {
				fmt.Printf("  %.400s\n", l)
			}
		}
	}
}

// parallel runs f(0..n-1) with 32 in flight and returns the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func simNode(i int) string { return fmt.Sprintf("sim-%04d", i) }

// createSimNode registers a node as kubelet does: Ready, node info, images.
func createSimNode(ctx context.Context, cs kubernetes.Interface, i int) error {
	// Every simulated node publishes MACs as its own agent would (ARP
	// responders are named from them).
	macs := nodestatus.EncodeMACs(map[string]string{"eth0": fmt.Sprintf("02:5c:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)})
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: simNode(i),
		Labels:      map[string]string{"kubernetes.io/hostname": simNode(i), "kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": "true"},
		Annotations: map[string]string{nodestatus.MACsAnnotation: macs}}},
		metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	n.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256)}, {Type: corev1.NodeHostName, Address: simNode(i)}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.1", ContainerRuntimeVersion: "containerd://2.1.0", KernelVersion: "6.1.0-56-amd64",
			OSImage: "Debian GNU/Linux 12 (bookworm)", OperatingSystem: "linux", Architecture: "amd64"},
	}
	for j := range 20 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: 50 << 20,
			Names: []string{fmt.Sprintf("registry.example/team/app-%02d@sha256:%064x", j, j), fmt.Sprintf("registry.example/team/app-%02d:v1.%d", j, j)}})
	}
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// heartbeats rewrites every node's Ready heartbeat once per period, spread
// evenly, as kubelet's node status report (nodeStatusReportFrequency) does.
func heartbeats(ctx context.Context, cs kubernetes.Interface, nodes int, period time.Duration) {
	tick := time.NewTicker(period / time.Duration(nodes))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % nodes {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now().UTC().Format(time.RFC3339)
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":%q}]}}`, now)
		_, _ = cs.CoreV1().Nodes().PatchStatus(ctx, simNode(i), []byte(patch))
	}
}

func svcName(i int) string { return fmt.Sprintf("lb-%05d", i) }

// createLBService creates LoadBalancer Service i with an ingress IP (as
// MetalLB's controller assigns it) and an EndpointSlice with one endpoint.
func createLBService(ctx context.Context, cs kubernetes.Interface, i int) error {
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName(i), Annotations: map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "bench"}},
		// No node ports (MetalLB's layer 2 needs none): 5,000 would not fit the range.
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr(false),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.%d.%d", i/250%250, i%250+1), IPMode: ptr(corev1.LoadBalancerIPModeVIP)}}
	if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svcName(i), Labels: map[string]string{discoveryv1.LabelServiceName: svcName(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint(i)},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	return err
}

func endpoint(i int) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 200+i/65536%50, i/256%256, i%256)},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}, NodeName: ptr(simNode(i % 1000))}
}

// churner creates a Service, deletes the oldest and scales up another one's
// endpoints, rate times a second.
type churner struct {
	cs           kubernetes.Interface
	oldest, next int
	done         atomic.Int64 // churn steps completed
	rolled       atomic.Int64 // endpoints replaced by rollouts
}

func (c *churner) run(ctx context.Context, rate float64) {
	if rate <= 0 {
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := createLBService(ctx, c.cs, c.next); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "churn create:", err)
		}
		_ = c.cs.CoreV1().Services("default").Delete(ctx, svcName(c.oldest), metav1.DeleteOptions{})
		_ = c.cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, svcName(c.oldest), metav1.DeleteOptions{})
		patch := fmt.Sprintf(`[{"op":"add","path":"/endpoints/-","value":{"addresses":[%q],"conditions":{"ready":true}}}]`, endpoint(c.next + 100000).Addresses[0])
		_, _ = c.cs.DiscoveryV1().EndpointSlices("default").Patch(ctx, svcName(c.oldest+1), types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		c.oldest++
		c.next++
		c.done.Add(1)
	}
}

// rollouts replaces, rate times a second, the endpoint of a long-lived
// Service (its pod replaced, as a rollout does): unlike the churn's
// scale-up, whose Service is deleted a second later, the change stays, so a
// data-plane check that compares kube-proxy's table with an older read of
// the EndpointSlices sees it until its next read. The Services chosen are
// about half the cluster younger than the oldest, never deleted within the
// run.
func (c *churner) rollouts(ctx context.Context, rate float64, services int) {
	if rate <= 0 {
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		name := svcName(int(c.done.Load()) + services/2 + k%(services/4+1))
		patch := fmt.Sprintf(`[{"op":"replace","path":"/endpoints/0/addresses","value":[%q]}]`, endpoint(300000 + k).Addresses[0])
		if _, err := c.cs.DiscoveryV1().EndpointSlices("default").Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "rollout:", err)
		}
		c.rolled.Add(1)
	}
}

// startAgents starts o.agents `ipvs-guard run` processes on sim-0000…, each
// over its own healthy copy of the host tree.
func startAgents(o scaleOptions, s *apiservertest.Server, work string) ([]*exec.Cmd, error) {
	var out []*exec.Cmd
	for i := range o.agents {
		root := filepath.Join(work, fmt.Sprintf("root-%d", i))
		if b, err := exec.Command("cp", "-a", o.hostTree, root).CombinedOutput(); err != nil {
			return out, fmt.Errorf("copying %s: %w: %s", o.hostTree, err, b)
		}
		if _, err := makeHealthy(root); err != nil {
			return out, err
		}
		if o.proxyMode == proxyModeNFTables {
			// The node's configuration agrees with the kube-proxy that
			// answers (the agent falls back on it while kube-proxy does
			// not answer).
			if err := writeAtomic(filepath.Join(root, "etc/rancher/rke2/config.yaml"), "kube-proxy-arg:\n  - proxy-mode=nftables\n"); err != nil {
				return out, err
			}
			if err := hosttreetest.ShipNFTables(root, true); err != nil {
				return out, err
			}
		}
		health := []string{"--health-probe-bind-address", "0"}
		if i == 0 && o.heapProfile != "" {
			health = []string{"--health-probe-bind-address", o.profileAddr, "--profiling"}
		}
		cmd := exec.Command(o.binary, append([]string{"run", "--kubeconfig", s.Kubeconfig, "--node-name", simNode(i), "--root", root, "--no-uevents",
			"--metrics-bind-address", "0", "-v", "2", o.peersFlag}, health...)...)
		logf, err := os.Create(filepath.Join(work, fmt.Sprintf("agent-%d.log", i)))
		if err != nil {
			return out, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return out, err
		}
		out = append(out, cmd)
	}
	return out, nil
}

// waitAllFalse waits until the first agents Nodes carry all four conditions, False.
func waitAllFalse(ctx context.Context, cs kubernetes.Interface, agents int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		bad := ""
		for i := range agents {
			n, err := cs.CoreV1().Nodes().Get(ctx, simNode(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			owned := 0
			for _, c := range n.Status.Conditions {
				switch c.Type {
				case "IPVSModulesMissing", "KubeProxyIPVSDegraded", "KubeProxyDataplaneDegraded", "StrictARPDisabled", "LoadBalancerARPFailing":
					owned++
					if c.Status != corev1.ConditionFalse && bad == "" {
						bad = fmt.Sprintf("%s: %s=%s (%s) %s", n.Name, c.Type, c.Status, c.Reason, c.Message)
					}
				}
			}
			if owned != 5 && bad == "" {
				bad = fmt.Sprintf("%s: %d of 5 conditions", n.Name, owned)
			}
		}
		if bad == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every condition False after %s: %.300s", timeout, bad)
		}
		time.Sleep(time.Second)
	}
}

// sample is what one measurement window saw.
type sample struct {
	start                time.Time
	window               time.Duration
	nodeWrites, writes   []string // by the agents: conditions (nodes/status), all
	macWrites            []string // by the agents: the MAC annotation (nodes)
	reads                []string // by the agents: get and list (watches excluded)
	macValues            []string // the distinct annotation values they wrote
	watchEvents          map[string]float64
	watchBytes           map[string]float64
	cpuMillicores        []float64 // per pid of the measured processes (api, etcd, kube-proxy in nftables mode)
	serverRSS            []float64 // MiB, per pid of the measured processes
	agentCPU, agentRSS   []float64 // millicores, MiB, per agent
	agentAnon, agentFile []float64 // MiB per agent: RSS of anonymous memory (heap, stacks) and of mapped files (the binary)
}

// measure samples the API server's metrics, the audit log and /proc around a window.
func measure(ctx context.Context, cs kubernetes.Interface, auditLog string, window time.Duration, server, agents []int) (sample, error) {
	ev0, by0, err := watchMetrics(ctx, cs)
	if err != nil {
		return sample{}, err
	}
	w0, err := scaleAgentWrites(auditLog)
	if err != nil {
		return sample{}, err
	}
	all := append(append([]int{}, server...), agents...)
	t0 := make([]int64, len(all))
	for i, p := range all {
		t0[i], _ = cpuTicks(p)
	}
	start := time.Now()
	time.Sleep(window)
	d := time.Since(start)
	out := sample{start: start, window: d, watchEvents: map[string]float64{}, watchBytes: map[string]float64{}}
	for i, p := range all {
		t1, _ := cpuTicks(p)
		mc := float64(t1-t0[i]) / 100 / d.Seconds() * 1000
		if i < len(server) {
			out.cpuMillicores = append(out.cpuMillicores, mc)
			rss, _ := rssKiB(p)
			out.serverRSS = append(out.serverRSS, float64(rss)/1024)
		} else {
			rss, _ := rssKiB(p)
			out.agentCPU = append(out.agentCPU, mc)
			out.agentRSS = append(out.agentRSS, float64(rss)/1024)
			anon, file := rssSplitKiB(p)
			out.agentAnon = append(out.agentAnon, float64(anon)/1024)
			out.agentFile = append(out.agentFile, float64(file)/1024)
		}
	}
	ev1, by1, err := watchMetrics(ctx, cs)
	if err != nil {
		return sample{}, err
	}
	for k, v := range ev1 {
		out.watchEvents[k] = v - ev0[k]
	}
	for k, v := range by1 {
		out.watchBytes[k] = v - by0[k]
	}
	w1, err := scaleAgentWrites(auditLog)
	if err != nil {
		return sample{}, err
	}
	if out.macValues, err = macValues(auditLog, len(w0)); err != nil {
		return sample{}, err
	}
	for _, w := range w1[len(w0):] {
		if v := strings.Fields(w)[0]; v == "get" || v == "list" {
			out.reads = append(out.reads, w)
		} else {
			out.writes = append(out.writes, w)
		}
	}
	for _, w := range out.writes {
		switch strings.Fields(w)[1] {
		case "nodes/status":
			out.nodeWrites = append(out.nodeWrites, w)
		case "nodes":
			out.macWrites = append(out.macWrites, w)
		}
	}
	return out, nil
}

// watchMetrics reads apiserver_watch_events_total and the sum of
// apiserver_watch_events_sizes, per kind: every event sent to a watcher.
func watchMetrics(ctx context.Context, cs kubernetes.Interface) (events, bytes map[string]float64, err error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	events, bytes = map[string]float64{}, map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var m map[string]float64
		switch {
		case strings.HasPrefix(line, "apiserver_watch_events_total{"):
			m = events
		case strings.HasPrefix(line, "apiserver_watch_events_sizes_sum{"):
			m = bytes
		default:
			continue
		}
		kind := label(line, "resource")
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[kind] += v
	}
	return events, bytes, sc.Err()
}

func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// scaleAgentWrites lists "verb resource/subresource" for every request by an
// agent the audit policy logs: writes, gets and lists (measure splits them).
func scaleAgentWrites(auditLog string) ([]string, error) {
	return auditWrites(auditLog, func(_, userAgent string) bool { return strings.HasPrefix(userAgent, "ipvs-guard") })
}

// statusPatch is one Node status patch an agent sent, from the audit log.
type statusPatch struct {
	received time.Time
	node     string
	code     int    // the API server's response code (409: a conflict, nothing written)
	body     string // the strategic-merge patch as sent
}

// agentStatusPatches returns the agents' Node status patches received at or
// after since, with their bodies (the audit policy logs them in full).
func agentStatusPatches(auditLog string, since time.Time) ([]statusPatch, error) {
	f, err := os.Open(auditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []statusPatch
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for sc.Scan() {
		var ev struct {
			Verb      string          `json:"verb"`
			UserAgent string          `json:"userAgent"`
			Received  time.Time       `json:"requestReceivedTimestamp"`
			Request   json.RawMessage `json:"requestObject"`
			ObjectRef struct {
				Resource, Subresource, Name string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !strings.HasPrefix(ev.UserAgent, "ipvs-guard") ||
			ev.Verb != "patch" || ev.ObjectRef.Resource != "nodes" || ev.ObjectRef.Subresource != "status" || ev.Received.Before(since) {
			continue
		}
		out = append(out, statusPatch{received: ev.Received, node: ev.ObjectRef.Name, code: ev.ResponseStatus.Code, body: string(ev.Request)})
	}
	return out, sc.Err()
}

// macValues returns the distinct MAC annotation values the agents patched,
// skipping their first skip writes.
func macValues(auditLog string, skip int) ([]string, error) {
	b, err := os.ReadFile(auditLog)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			UserAgent     string `json:"userAgent"`
			RequestObject struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"requestObject"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || !strings.HasPrefix(ev.UserAgent, "ipvs-guard") {
			continue
		}
		n++
		v, ok := ev.RequestObject.Metadata.Annotations[nodestatus.MACsAnnotation]
		if n <= skip || !ok || seen[v] {
			continue
		}
		seen[v] = true
		out = append(out, v)
	}
	return out, nil
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

func stats(xs []float64) (avg, maxv float64) {
	for _, x := range xs {
		avg += x
		maxv = max(maxv, x)
	}
	if len(xs) > 0 {
		avg /= float64(len(xs))
	}
	return avg, maxv
}

func report(o scaleOptions, base, with sample) error {
	perHour := func(v float64, d time.Duration) float64 { return v * float64(time.Hour) / float64(d) }
	fmt.Printf("\nkube-proxy mode: %s\n", o.proxyMode)
	fmt.Printf("window %s each; per agent per hour = (with agents - baseline) / agents, extrapolated to an hour\n", with.window.Round(time.Second))
	var kinds []string
	for k := range with.watchEvents {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Printf("  %-22s %14s %14s\n", "watch events", "events/agent/h", "KiB/agent/h")
	for _, k := range kinds {
		e := (perHour(with.watchEvents[k], with.window) - perHour(base.watchEvents[k], base.window)) / float64(o.agents)
		b := (perHour(with.watchBytes[k], with.window) - perHour(base.watchBytes[k], base.window)) / float64(o.agents) / 1024
		watched := k == "nodes" || k == "services" || k == "endpointslices" || k == "servicel2statuses"
		if !watched && e < 1000 && b < 100 {
			continue // the API server's own watchers come and go: noise
		}
		fmt.Printf("  %-22s %14.0f %14.0f\n", k, e, b)
	}
	e := (perHour(sum(with.watchEvents), with.window) - perHour(sum(base.watchEvents), base.window)) / float64(o.agents)
	b := (perHour(sum(with.watchBytes), with.window) - perHour(sum(base.watchBytes), base.window)) / float64(o.agents) / 1024
	fmt.Printf("  %-22s %14.0f %14.0f\n", "total", e, b)
	fmt.Printf("  agent writes in the window: %d (%s)\n", len(with.writes), summarize(with.writes))
	fmt.Printf("  agent reads (get, list) in the window: %d => %.1f per agent per hour (%s)\n", len(with.reads),
		perHour(float64(len(with.reads)), with.window)/float64(o.agents), summarize(with.reads))
	fmt.Printf("  Node condition writes: %d => %.1f per agent per hour\n", len(with.nodeWrites), perHour(float64(len(with.nodeWrites)), with.window)/float64(o.agents))
	fmt.Printf("  MAC annotation writes: %d (every agent runs on this one host: its interfaces with an IPv4 address, which other tests add and remove, are what they publish)\n", len(with.macWrites))
	for _, v := range with.macValues {
		fmt.Printf("    published: %s\n", v)
	}
	cpuAvg, cpuMax := stats(with.agentCPU)
	rssAvg, rssMax := stats(with.agentRSS)
	anonAvg, anonMax := stats(with.agentAnon)
	fileAvg, fileMax := stats(with.agentFile)
	fmt.Printf("  agent CPU avg %.1f / max %.1f millicores; RSS avg %.1f / max %.1f MiB (%d Nodes, %d Services in the cluster)\n",
		cpuAvg, cpuMax, rssAvg, rssMax, o.nodes, o.services)
	fmt.Printf("    of which anonymous (heap, stacks) avg %.1f / max %.1f MiB, the mapped binary avg %.1f / max %.1f MiB\n", anonAvg, anonMax, fileAvg, fileMax)
	apiBase, apiWith := base.cpuMillicores[0]+base.cpuMillicores[1], with.cpuMillicores[0]+with.cpuMillicores[1]
	fmt.Printf("  kube-apiserver + etcd CPU: %.0f millicores baseline, %.0f with %d agents => %.1f millicores per agent\n",
		apiBase, apiWith, o.agents, (apiWith-apiBase)/float64(o.agents))
	if len(with.cpuMillicores) > 2 {
		fmt.Printf("  kube-proxy (nftables mode, sim-0000's, read by every agent): CPU %.0f millicores baseline, %.0f with the agents; RSS %.1f MiB\n",
			base.cpuMillicores[2], with.cpuMillicores[2], with.serverRSS[2])
	}
	var failed []string
	if len(with.nodeWrites) > 0 {
		failed = append(failed, fmt.Sprintf("agents wrote their Node conditions %d times during churn: %v", len(with.nodeWrites), with.nodeWrites))
	}
	if o.maxRSSMiB > 0 && rssMax > o.maxRSSMiB {
		failed = append(failed, fmt.Sprintf("agent RSS %.1f MiB > %.0f MiB", rssMax, o.maxRSSMiB))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

// arpResponder is a network namespace behind a veth that answers ARP for
// every 198.18.0.0/16 address with one MAC (proxy ARP), as one MetalLB
// speaker would for every LoadBalancer IP.
type arpResponder struct{ ns, host string }

func newARPResponder() (*arpResponder, error) {
	id := os.Getpid() % 100000
	r := &arpResponder{ns: fmt.Sprintf("ipvsg-scale-%d", id), host: fmt.Sprintf("isg%da", id)}
	peer, sink := fmt.Sprintf("isg%db", id), fmt.Sprintf("isg%dc", id)
	steps := [][]string{
		{"ip", "netns", "add", r.ns},
		{"ip", "link", "add", r.host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", r.ns},
		{"ip", "addr", "add", "198.18.255.254/16", "dev", r.host},
		{"ip", "link", "set", r.host, "up"},
		{"ip", "netns", "exec", r.ns, "sh", "-ec", fmt.Sprintf(`ip link set lo up; ip link set %[1]s up
ip link add %[2]s type veth peer name %[2]sp; ip link set %[2]s up; ip link set %[2]sp up
ip addr add 169.254.77.1/32 dev %[1]s; ip route add 198.18.0.0/16 dev %[2]s
sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
  net.ipv4.conf.%[1]s.rp_filter=0 net.ipv4.conf.%[1]s.proxy_arp=1 net.ipv4.neigh.%[1]s.proxy_delay=0`, peer, sink)},
	}
	for _, st := range steps {
		if out, err := exec.Command(st[0], st[1:]...).CombinedOutput(); err != nil {
			r.close()
			return nil, fmt.Errorf("setting up the ARP responder (%s): %w: %s (needs root)", strings.Join(st, " "), err, out)
		}
	}
	return r, nil
}

func (r *arpResponder) close() {
	_ = exec.Command("ip", "link", "del", r.host).Run()
	_ = exec.Command("ip", "netns", "del", r.ns).Run()
}

// printConditions prints the agent-owned conditions of a Node: their
// reasons say which checks ran (an nftables node's kube-proxy-sync and
// nftables-dataplane verdicts, not "not in use").
func printConditions(ctx context.Context, cs kubernetes.Interface, node string) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("%s's conditions:\n", node)
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case "IPVSModulesMissing", "KubeProxyIPVSDegraded", "KubeProxyDataplaneDegraded", "StrictARPDisabled", "LoadBalancerARPFailing":
			fmt.Printf("  %s=%s %s: %.300s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return nil
}

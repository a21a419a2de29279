// SPDX-License-Identifier: Apache-2.0

//go:build node

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/nodevm"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

const debianNode = "debian-node"

// guestKubeconfig is a kubeconfig for the guest: the host's API server at
// nodevm.HostAddr, whose self-signed certificate names "kubernetes".
func guestKubeconfig(t *testing.T, srv *apiservertest.Server) string {
	t.Helper()
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["host"] = &clientcmdapi.Cluster{Server: "https://" + nodevm.HostAddr + ":" + port, CertificateAuthorityData: ca, TLSServerName: "kubernetes"}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{Token: srv.AdminToken}
	cfg.Contexts["host"] = &clientcmdapi.Context{Cluster: "host", AuthInfo: "node"}
	cfg.CurrentContext = "host"
	raw, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// allFalse reports whether the Node shows all four ipvs-guard conditions False.
func allFalse(n *corev1.Node) bool {
	for _, ty := range nodestatus.AllConditionTypes() {
		if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeConditionType(ty) && c.Status == corev1.ConditionFalse
		}) {
			return false
		}
	}
	return true
}

// TestDebianNodeAgentReboot runs the agent (as a systemd unit with the
// chart's capabilities and flags) and kube-proxy in IPVS mode (a host
// process unit) on the stock Debian node against the host's API server.
// Boot 1: no IPVS module is loaded or declared, kube-proxy cannot start; the
// agent loads and declares them, kube-proxy comes up in IPVS mode, all four
// conditions end False. Then a real reboot (the conditions removed from the
// Node meanwhile, so they must be published again): systemd-modules-load
// loads what the agent declared before kube-proxy and the agent start, the
// conditions come back False. Warning Events after the reboot are logged
// as a finding (see the end of the test).
func TestDebianNodeAgentReboot(t *testing.T) {
	kubeProxy := apiservertest.CachedBinary("kube-proxy")
	_, err := os.Stat(kubeProxy)
	testenv.Require(t, err == nil, "kube-proxy is needed: run hack/apiserver/install.sh kube-proxy")
	srv := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(srv.AdminConfig())
	ctx := context.Background()
	registerNode(ctx, t, cs, debianNode)
	const dir = "testdata"
	unit := func(name string) nodevm.File { return nodevm.File{Source: filepath.Join(dir, name)} }
	wants := "/etc/systemd/system/multi-user.target.wants/"
	vm := nodevm.Start(t, nodevm.Options{Net: true, Files: map[string]nodevm.File{
		"/usr/local/bin/ipvs-guard":                       {Source: ipvsguardtest.Binary(t), Mode: 0o755},
		"/usr/local/bin/kube-proxy":                       {Source: kubeProxy, Mode: 0o755},
		"/usr/local/sbin/node-agent-scenario":             {Source: filepath.Join(dir, "node-agent-scenario"), Mode: 0o755},
		"/etc/ipvs-guard/kubeconfig":                      {Data: guestKubeconfig(t, srv), Mode: 0o600},
		"/etc/systemd/network/10-qemu.network":            unit("10-qemu.network"),
		"/etc/systemd/system/ipvs-guard.service":          unit("ipvs-guard.service"),
		"/etc/systemd/system/kube-proxy.service":          unit("kube-proxy.service"),
		"/etc/systemd/system/node-agent-scenario.service": unit("node-agent-scenario.service"),
		wants + "systemd-networkd.service":                {Link: "/lib/systemd/system/systemd-networkd.service"},
		wants + "ipvs-guard.service":                      {Link: "/etc/systemd/system/ipvs-guard.service"},
		wants + "kube-proxy.service":                      {Link: "/etc/systemd/system/kube-proxy.service"},
		wants + "node-agent-scenario.service":             {Link: "/etc/systemd/system/node-agent-scenario.service"},
	}})
	waitFalse := func(what string) time.Time {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, debianNode, metav1.GetOptions{})
			return err == nil && allFalse(n), nil
		})
		if err != nil {
			n, _ := cs.CoreV1().Nodes().Get(ctx, debianNode, metav1.GetOptions{})
			t.Fatalf("%s: the four conditions never all False: %v; node conditions %+v; console tail:\n%s", what, err, n.Status.Conditions, consoleTail(vm, 80))
		}
		return time.Now()
	}

	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=1 begin=", 1, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	booted := time.Now()
	waitFalse("boot 1")
	t.Logf("boot 1: scenario start -> agent remediated, kube-proxy in IPVS mode, all four conditions False: %.1f s", time.Since(booted).Seconds())

	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=1 done=", 1, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	rebootCmd := time.Now()
	if n, err := cs.CoreV1().Nodes().Get(ctx, debianNode, metav1.GetOptions{}); err == nil {
		for _, c := range n.Status.Conditions {
			t.Logf("before the reboot: %s=%s %s", c.Type, c.Status, c.Reason)
		}
	}
	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=2 begin=", 1, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	rebooted := time.Now()
	n, err := cs.CoreV1().Nodes().Get(ctx, debianNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodestatus.Remove(ctx, nodestatus.NewClient(kubetest.FromClientset(cs)), n, []string{nodestatus.MACsAnnotation}); err != nil {
		t.Fatal(err)
	}
	removed := time.Now().Truncate(time.Second) // conditions carry whole seconds
	republished := waitFalse("after the reboot")
	n, err = cs.CoreV1().Nodes().Get(ctx, debianNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if strings.HasPrefix(string(c.Type), "Kubelet") || c.Type == corev1.NodeReady {
			continue
		}
		if c.LastTransitionTime.Time.Before(removed) {
			t.Errorf("condition %s was not published again after the reboot: lastTransitionTime %v before the removal at %v", c.Type, c.LastTransitionTime, removed)
		}
	}
	t.Logf("reboot: systemctl reboot -> boot 2 scenario start %.1f s -> all four conditions published False again %.1f s (%.1f s in all)",
		rebooted.Sub(rebootCmd).Seconds(), republished.Sub(rebooted).Seconds(), republished.Sub(rebootCmd).Seconds())

	console, err := os.ReadFile(vm.Console)
	if err != nil {
		t.Fatal(err)
	}
	b2 := facts(string(console))[2]
	if got, want := strings.TrimSpace(b2["loaded"]), "ip_vs ip_vs_rr ip_vs_sh ip_vs_wrr nf_conntrack"; got != want {
		t.Errorf("loaded at boot 2 before the agent and kube-proxy started: %q, want %q", got, want)
	}
	t.Logf("systemd-modules-load at boot 2: %s", strings.TrimSpace(b2["modules-load"]))
	evs, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Known finding, reported rather than asserted until the agent waits
	// for kube-proxy's first sync after a (re)start: right after the
	// reboot the agent checks the IPVS table before kube-proxy has
	// programmed it and publishes KubeProxyIPVSDegraded=True
	// (VirtualServerMissing) for one resync, with a Warning Event.
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning && e.Regarding.Name == debianNode && e.EventTime.Time.After(rebooted.Add(-time.Second)) {
			t.Logf("FINDING: Warning Event after the reboot: %s %s: %s", e.Reason, e.Action, e.Note)
		}
	}
	agentMemoryWith1000LBs(ctx, t, cs, vm)
}

// consoleTail returns the last n lines of the node's console.
func consoleTail(vm *nodevm.VM, n int) string {
	raw, err := os.ReadFile(vm.Console)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(raw), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// memoryRE is the scenario's report of the agent's cgroup memory.
var memoryRE = regexp.MustCompile(`NODE-SCENARIO boot=2 memory=current=(\d+) peak=(\d+)`)

// agentMemoryWith1000LBs makes 1,000 LoadBalancer Services with ingress IPs,
// waits until the agent has taken them into its ARP check, then reads the
// agent's cgroup memory.peak: it must stay under the chart's memory limit.
func agentMemoryWith1000LBs(ctx context.Context, t *testing.T, cs kubernetes.Interface, vm *nodevm.VM) {
	t.Helper()
	start := time.Now()
	for i := range 1000 {
		svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lb-%04d", i)},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("10.200.%d.%d", i/250, i%250+1)}}
		if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("1,000 LoadBalancer Services made in %.1f s", time.Since(start).Seconds())
	// The agent sees them: its ARP condition leaves NoTargets (it probes
	// them; nobody answers here) or its strict-ARP condition leaves
	// NoLoadBalancerIPs (kube-proxy put them on kube-ipvs0).
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, debianNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return (c.Type == corev1.NodeConditionType(nodestatus.LoadBalancerARPFailing) && c.Reason != "NoTargets") ||
				(c.Type == corev1.NodeConditionType(nodestatus.StrictARPDisabled) && c.Reason != "NoLoadBalancerIPs")
		}), nil
	})
	if err != nil {
		t.Fatalf("the agent's conditions never reflected the 1,000 LoadBalancer IPs: %v; console tail:\n%s", err, consoleTail(vm, 60))
	}
	t.Logf("the agent's conditions reflect LoadBalancer IPs %.1f s after the first Service was made", time.Since(start).Seconds())
	// Five more reports (5 s apart): the peak covers several resyncs
	// (5 s) over all 1,000 Services.
	before := strings.Count(consoleTail(vm, 1<<20), "boot=2 memory=")
	raw, err := vm.WaitConsole(ctx, "boot=2 memory=", before+5, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m := memoryRE.FindAllStringSubmatch(raw, -1)
	if len(m) == 0 {
		t.Fatal("no memory report from the scenario")
	}
	last := m[len(m)-1]
	cur, _ := strconv.ParseInt(last[1], 10, 64)
	peak, _ := strconv.ParseInt(last[2], 10, 64)
	const chartLimit = 128 << 20 // deploy/ipvs-guard/values.yaml resources.limits.memory
	t.Logf("agent cgroup (page cache included, as for a pod) with 1,000 LoadBalancer Services: memory.current %.1f MiB, memory.peak %.1f MiB (chart limit 128 MiB)", float64(cur)/(1<<20), float64(peak)/(1<<20))
	if peak <= 0 || peak >= chartLimit {
		t.Errorf("memory.peak %d bytes: want above 0 and under the chart's 128 MiB limit", peak)
	}
}

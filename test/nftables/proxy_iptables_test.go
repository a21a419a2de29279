// SPDX-License-Identifier: Apache-2.0

//go:build nftables

package nftables

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/nftdrift"
)

// TestKubeProxyIPTables (after TestKubeProxyNFTables: files run in name
// order): the real kube-proxy in iptables mode over this
// host's iptables-nft: its chains read over netlink are present; a flushed
// ruleset (the firewall reload) while kube-proxy is stopped is named at
// once, and once it runs again its canary puts them back.
func TestKubeProxyIPTables(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, os.Getenv("NFT_NETNS") != "", "run through hack/test-nftables.sh (a private network namespace)")
	kpBin := testenv.Tool(t, "KUBE_PROXY", "kube-proxy", "hack/apiserver/install.sh kube-proxy")
	nft := testenv.Tool(t, "NFT", "nft", "apt-get install nftables")
	ipt := testenv.Tool(t, "IPTABLES", "iptables", "apt-get install iptables")
	if out, err := exec.Command(ipt, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "nf_tables") {
		t.Fatalf("iptables is not the nf_tables backend: %s (%v)", out, err)
	}
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("web", "web-1", 8080, "10.244.1.5@n2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "kube-proxy.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kpBin, "--proxy-mode=iptables", "--kubeconfig="+s.Kubeconfig, "--hostname-override="+node,
		"--metrics-bind-address=127.0.0.1:10349", "--healthz-bind-address=127.0.0.1:10356", "--cluster-cidr=10.244.0.0/16",
		"--conntrack-max-per-core=0", "--iptables-sync-period=5s", "--v=2")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// Leave the namespace as found: iptables mode's chains (ip and
		// ip6) would otherwise stay for the tests after this one.
		if out, err := exec.Command(nft, "flush", "ruleset").CombinedOutput(); err != nil {
			t.Errorf("nft flush ruleset: %v: %s", err, out)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			t.Logf("kube-proxy log tail:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	client, err := kube.NewForConfig(s.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	kp := kubeproxy.NewClient("127.0.0.1:10349", 2*time.Second)
	c, err := nftdrift.NewChecker(nftdrift.Config{Read: (&nftdrift.Reader{}).Read, ReadIPTables: (&nftdrift.Reader{}).ReadIPTables, Mode: kp.ProxyMode,
		Services: ipvscheck.NewCluster(client).Services, NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string, within time.Duration, ok func(check.Result) bool) (check.Result, time.Duration) {
		t.Helper()
		return waitCheck(t, c, what, within, ok)
	}
	r, took := wait("kube-proxy's chains present", 60*time.Second, func(r check.Result) bool { return r.Reason == nftdrift.ReasonIPTablesOK })
	t.Logf("kube-proxy in iptables mode; chains present after %.1fs: %s", took.Seconds(), r.Message)
	if out, err := exec.Command(ipt, "-t", "nat", "-S", nftdrift.ChainKubeServices).CombinedOutput(); err != nil {
		t.Fatalf("iptables does not list %s while the check finds it: %v: %s", nftdrift.ChainKubeServices, err, out)
	}

	// kube-proxy polls its canary every 5s and may restore the chains
	// within milliseconds: stopped, it cannot while the check reads.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(nft, "flush", "ruleset").CombinedOutput(); err != nil {
		t.Fatalf("nft flush ruleset: %v: %s", err, out)
	}
	r, took = wait("the chains missing", 10*time.Second, func(r check.Result) bool {
		return r.Reason == nftdrift.ReasonIPTablesChainsMissing && strings.Contains(r.Message, nftdrift.ChainKubeServices)
	})
	if out, err := exec.Command(ipt, "-t", "nat", "-S", nftdrift.ChainKubeServices).CombinedOutput(); err == nil {
		t.Errorf("iptables lists %s while the check says it is missing:\n%s", nftdrift.ChainKubeServices, out)
	}
	t.Logf("FIGURE nft flush ruleset in iptables mode → %s: %.2fs: %s", r.Reason, took.Seconds(), r.Message)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	// kube-proxy's canary monitor (every sync period, 5s here) resyncs.
	_, _ = wait("kube-proxy's canary restoring the chains", 30*time.Second, func(r check.Result) bool { return r.Reason == nftdrift.ReasonIPTablesOK })
	t.Logf("FIGURE kube-proxy restored its chains %.1fs after SIGCONT (its canary, sync period 5s); the check ok again", time.Since(flushed).Seconds())
}

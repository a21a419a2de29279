// SPDX-License-Identifier: Apache-2.0

//go:build guest

package modules_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// silentKubeProxy is a metrics address nothing listens on: kube-proxy not
// started yet (after a reboot) or restarting.
const silentKubeProxy = "127.0.0.1:1"

// rke2NFTablesManifest is the static pod RKE2 renders for kube-proxy in
// nftables mode (the guest has no testdata; pkg/kubeproxy/testdata/rke2
// holds the whole file).
const rke2NFTablesManifest = `apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-proxy
    tier: control-plane
  name: kube-proxy
  namespace: kube-system
spec:
  containers:
  - args:
    - --cluster-cidr=10.42.0.0/16
    - --conntrack-max-per-core=0
    - --healthz-bind-address=127.0.0.1
    - --hostname-override=node-1
    - --kubeconfig=/var/lib/rancher/rke2/agent/kubeproxy.kubeconfig
    - --proxy-mode=nftables
    command:
    - kube-proxy
    image: index.docker.io/rancher/hardened-kubernetes:v1.34.10-rke2r1-build20251120
    name: kube-proxy
    securityContext:
      privileged: true
  hostNetwork: true
  priorityClassName: system-cluster-critical
`

// rke2NFTablesNode writes an RKE2 node's configuration of kube-proxy in
// nftables mode into the guest's root, as RKE2 leaves it after a
// migration: config.yaml (with a drop-in) and the rendered static pod.
func rke2NFTablesNode(t *testing.T) {
	t.Helper()
	files := map[string]string{
		"/etc/rancher/rke2/config.yaml":                             "token: secret\nkube-proxy-arg:\n  - proxy-mode=ipvs\n  - ipvs-strict-arp=true\n",
		"/etc/rancher/rke2/config.yaml.d/50-nftables.yaml":          "kube-proxy-arg:\n  - proxy-mode=nftables\n",
		"/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml": rke2NFTablesManifest,
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		os.RemoveAll("/etc/rancher")
		os.RemoveAll("/var/lib/rancher")
	})
}

// requireNothingIPVS fails unless no IPVS module is loaded and nothing is
// declared for boot.
func requireNothingIPVS(t *testing.T, what string) {
	t.Helper()
	guest.RequireNotLoaded(t, "ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh")
	for _, d := range modulesLoadDirs {
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("%s: %s holds %v", what, d, ents)
		}
	}
}

// runOneResync runs `ipvs-guard run --remediate` (its API server
// unreachable: local checks go on) until the modules check reported once,
// and returns the modules check's status line from /metrics.
func runOneResync(t *testing.T) string {
	t.Helper()
	const metricsAddr = "127.0.0.1:18081"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	agent := exec.Command(guest.Bin(), "run", "--kubeconfig", kubeconfig, "--node-name", "guest", "--remediate",
		"--kube-proxy-metrics-address", silentKubeProxy, "--resync-period", "2s",
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--health-probe-bind-address", "0")
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- agent.Wait() }()
	defer func() {
		agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			agent.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	}()
	// Two resyncs of the modules check: its status, then one more period.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + metricsAddr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, `ipvs_guard_check_status{check="modules"`) && strings.HasSuffix(l, " 1") {
					time.Sleep(3 * time.Second)
					return l
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the agent never reported the modules check")
	return ""
}

// TestGuestMigratedRKE2NodeGetsNoIPVS: an RKE2 node migrated to nftables
// (config.yaml, its drop-in and the rendered kube-proxy static pod say
// nftables), kube-proxy not answering (a reboot, a restart): diagnose --fix
// and a remediating agent load nothing and declare nothing, and every IPVS
// check says the prerequisites do not apply, naming where the mode came
// from.
func TestGuestMigratedRKE2NodeGetsNoIPVS(t *testing.T) {
	freshNode(t)
	rke2NFTablesNode(t)
	_, m := diagnoseJSON(t, 0, "--fix", "--kube-proxy-metrics-address", silentKubeProxy)
	if m.Status != string(check.StatusSkipped) || m.Reason != check.ReasonIPVSNotInUse ||
		!strings.Contains(m.Message, "configured for nftables mode (node configuration: /etc/rancher/rke2/config.yaml and /var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml)") || len(m.Actions) > 0 {
		t.Errorf("modules check %+v", m)
	}
	requireNothingIPVS(t, "diagnose --fix")

	line := runOneResync(t)
	if !strings.Contains(line, `status="skipped"`) {
		t.Errorf("the agent's modules check: %s", line)
	}
	requireNothingIPVS(t, "run --remediate")
}

// TestGuestKernelStateTellsNFTables: no configuration at all, kube-proxy
// silent, but the kernel holds kube-proxy's nftables table and no
// kube-ipvs0: nftables mode, nothing loaded or declared. Without the table
// nothing tells the mode: diagnose --fix reports, loads and declares
// nothing, and says why.
func TestGuestKernelStateTellsNFTables(t *testing.T) {
	freshNode(t)

	// Nothing tells: report only.
	_, m := diagnoseJSON(t, 1, "--fix", "--kube-proxy-metrics-address", silentKubeProxy)
	if m.Reason != modules.ReasonModulesNotLoaded || !strings.HasPrefix(m.Message, "kube-proxy's mode is not known yet: kube-proxy not reachable at "+silentKubeProxy) || len(m.Actions) > 0 {
		t.Errorf("modules check with nothing telling the mode: %+v", m)
	}
	requireNothingIPVS(t, "diagnose --fix, mode unknown")

	// kube-proxy's nftables table, as its nftables mode leaves it.
	l, err := modules.NewNativeLoader(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(context.Background(), []string{"nf_tables"}); err != nil {
		t.Fatal(err)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "kube-proxy"})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.DelTable(tbl)
		c.Flush()
	})

	_, m = diagnoseJSON(t, 0, "--fix", "--kube-proxy-metrics-address", silentKubeProxy)
	if m.Status != string(check.StatusSkipped) || m.Reason != check.ReasonIPVSNotInUse ||
		!strings.Contains(m.Message, "configured for nftables mode (kernel state: a kube-proxy nftables table and no kube-ipvs0)") || len(m.Actions) > 0 {
		t.Errorf("modules check with kube-proxy's nftables table: %+v", m)
	}
	requireNothingIPVS(t, "diagnose --fix, kernel state nftables")

	line := runOneResync(t)
	if !strings.Contains(line, `status="skipped"`) {
		t.Errorf("the agent's modules check: %s", line)
	}
	requireNothingIPVS(t, "run --remediate, kernel state nftables")
}

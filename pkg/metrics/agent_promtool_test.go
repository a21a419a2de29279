// SPDX-License-Identifier: Apache-2.0

//go:build promtool

package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// rss returns VmRSS and VmHWM of pid in KiB.
func rss(pid int) (cur, peak string) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?", "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch k {
		case "VmRSS":
			cur = strings.TrimSpace(v)
		case "VmHWM":
			peak = strings.TrimSpace(v)
		}
	}
	return cur, peak
}

// TestRunningAgentScrape builds ipvs-guard, runs `ipvs-guard run` against a
// real kube-apiserver (report-only, node-local checks on this host), scrapes
// its /metrics and has promtool check the exposition. It logs the agent's RSS.
func TestRunningAgentScrape(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	testenv.Require(t, err == nil, "promtool not on PATH (make test-rules installs it)")
	srv := apiservertest.Start(t, apiservertest.Options{})
	node := "n1"
	cs, err := kubernetes.NewForConfig(srv.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node: %v", err)
	}

	bin := ipvsguardtest.Binary(t)
	metricsAddr, healthAddr := freeAddr(t), freeAddr(t)
	var logs bytes.Buffer
	agent := exec.Command(bin, "run", "--kubeconfig", srv.Kubeconfig, "--node-name", node,
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--health-probe-bind-address", healthAddr,
		"--resync-period", "5s", "--initial-publish-delay", "2s", "--no-uevents", "--v=2")
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	t.Cleanup(func() {
		_ = agent.Process.Kill()
	})

	get := func(addr, path string) (int, []byte) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	start := time.Now()
	for {
		if code, _ := get(healthAddr, "/readyz"); code == http.StatusOK {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("agent exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("agent not ready after 60s\n%s", logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("agent ready in %v", time.Since(start).Round(time.Millisecond))
	// Let a few resyncs run, then scrape.
	time.Sleep(6 * time.Second)
	code, body := get(metricsAddr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, logs.String())
	}
	for _, want := range []string{
		"ipvs_guard_build_info{",
		`ipvs_guard_check_status{check="modules",status=`,
		`ipvs_guard_node_condition_status{condition="IPVSModulesMissing",status=`,
		`ipvs_guard_node_condition_status{condition="LoadBalancerARPFailing",status=`,
		`ipvs_guard_reconcile_total{check="modules"}`,
		// The migration advisories: the readiness report ran at start (it
		// runs hourly), the leftovers check is skipped while IPVS is
		// assumed (no kube-proxy here), and neither has a condition.
		`ipvs_guard_check_status{check="nftables-readiness",status=`,
		"ipvs_guard_nftables_ready ",
		`ipvs_guard_check_status{check="ipvs-leftovers",status="skipped"} 1`,
		`ipvs_guard_reconcile_duration_seconds_bucket{check="modules",le=`,
		"process_resident_memory_bytes",
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	out, err := check.CombinedOutput()
	var ipvsGuard int
	for _, l := range bytes.Split(body, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("ipvs_guard_")) {
			ipvsGuard++
		}
	}
	t.Logf("promtool check metrics on a real scrape (%d bytes, %d ipvs_guard_ samples): err=%v %s", len(body), ipvsGuard, err, out)
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	if dump := os.Getenv("IPVS_GUARD_SCRAPE_OUT"); dump != "" {
		_ = os.WriteFile(dump, body, 0o644)
	}
	cur, peak := rss(agent.Process.Pid)
	t.Logf("agent RSS after %v: VmRSS %s, VmHWM %s", time.Since(start).Round(time.Second), cur, peak)

	// SIGTERM: the agent stops and exits 0 within a few seconds.
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("agent still running 10s after SIGTERM\n%s", logs.String())
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
)

// TestRunPublishesAndStopsOnSignal runs `ipvs-guard run` in process against a
// real API server over a captured host tree, then cancels its context as
// SIGTERM does: it must exit 0 within a few seconds.
func TestRunPublishesAndStopsOnSignal(t *testing.T) {
	s, admin, root, health := startRunFixture(t)
	ctx := context.Background()

	runCtx, stop := context.WithCancel(ctx)
	code := make(chan int, 1)
	go func() {
		code <- execute(runCtx, []string{"run", "--kubeconfig", s.Kubeconfig, "--node-name", "node-a", "--root", root,
			"--health-probe-bind-address", health, "--metrics-bind-address", health, "--metrics-secure=false", "--resync-period", "2s"})
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + health + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz never became ready")
		}
		select {
		case c := <-code:
			t.Fatalf("run exited early with %d", c)
		case <-time.After(50 * time.Millisecond):
		}
	}
	var cond *corev1.NodeCondition
	for time.Now().Before(deadline) && cond == nil {
		n, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range n.Status.Conditions {
			if c.Type == "IPVSModulesMissing" {
				cond = &n.Status.Conditions[i]
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The captured Debian host has no IPVS module loaded or declared.
	if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != "ModulesNotLoaded" {
		t.Errorf("IPVSModulesMissing = %+v", cond)
	}

	resp, err := http.Get("http://" + health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `ipvs_guard_node_condition_status{`) || !strings.Contains(string(body), `ipvs_guard_reconcile_total{`) {
		t.Errorf("/metrics serves no ipvs_guard_ metric:\n%.500s", body)
	}

	stopped := time.Now()
	stop()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit code %d, want 0", c)
		}
		t.Logf("stopped in %s", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop within 5 s of the signal")
	}
}

// nodeConditions returns node-a's conditions by type.
func nodeConditions(t *testing.T, admin kubernetes.Interface) map[string]corev1.NodeCondition {
	t.Helper()
	n, err := admin.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.NodeCondition{}
	for _, c := range n.Status.Conditions {
		out[string(c.Type)] = c
	}
	return out
}

// startRunFixture starts a real API server with a Node node-a, copies the
// captured debian12 host tree for --root, and picks a free loopback address
// for the agent's health and metrics server.
func startRunFixture(t *testing.T) (s *apiservertest.Server, admin kubernetes.Interface, root, health string) {
	t.Helper()
	s = apiservertest.Start(t, apiservertest.Options{})
	admin = kubernetes.NewForConfigOrDie(s.AdminConfig())
	if _, err := admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", filepath.Join("..", "..", "pkg", "modules", "testdata", "debian12"), root).CombinedOutput(); err != nil {
		t.Fatalf("copying the host tree: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health = l.Addr().String()
	l.Close()
	return s, admin, root, health
}

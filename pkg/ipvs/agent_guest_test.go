// SPDX-License-Identifier: Apache-2.0

//go:build guest

package ipvs_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
)

const agentMetrics = "127.0.0.1:18080"

// TestGuestReloadUnderAgent unloads and reloads ip_vs under a running
// `ipvs-guard run` (its API server unreachable: local checks go on) and reads
// its /metrics: the table, then the gap (the ipvs check is a problem and the
// table gauge is gone), then the new table — the same process throughout.
func TestGuestReloadUnderAgent(t *testing.T) {
	freshGuest(t)
	loadModules(t, "ip_vs", "ip_vs_rr", "dummy")
	if r := guest.Run(t, "/usr/sbin/ip", "link", "add", "kube-ipvs0", "type", "dummy"); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	ipvsadm(t, "-A", "-t", "10.96.0.1:443", "-s", "rr")

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	var logs bytes.Buffer
	agent := exec.Command(guest.Bin(), "run", "--kubeconfig", kubeconfig, "--node-name", "guest",
		"--resync-period", "1s", "--metrics-bind-address", agentMetrics, "--metrics-secure=false", "--health-probe-bind-address", "0")
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	pid := agent.Process.Pid
	done := make(chan error, 1)
	go func() { done <- agent.Wait() }()
	t.Cleanup(func() {
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
	})
	waitMetrics := func(what string, ok func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		var last string
		for time.Now().Before(deadline) {
			select {
			case err := <-done:
				t.Fatalf("agent exited (%v) while waiting for %s", err, what)
			default:
			}
			if resp, err := http.Get("http://" + agentMetrics + "/metrics"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				last = string(b)
				if ok(last) {
					return last
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		var ipvsLines []string
		for _, l := range strings.Split(last, "\n") {
			if strings.Contains(l, "ipvs") && !strings.HasPrefix(l, "#") {
				ipvsLines = append(ipvsLines, l)
			}
		}
		t.Fatalf("timed out waiting for %s; ipvs metrics:\n%s", what, strings.Join(ipvsLines, "\n"))
		return ""
	}
	const problem = `ipvs_guard_check_status{check="ipvs",status="problem"} 1`
	waitMetrics("the table (1 virtual server)", func(m string) bool { return strings.Contains(m, "ipvs_guard_ipvs_virtual_servers 1\n") })
	t.Logf("agent pid %d sees 1 virtual server", pid)

	ipvsadm(t, "-C")
	for _, m := range []string{"ip_vs_rr", "ip_vs"} {
		if err := unix.DeleteModule(m, 0); err != nil {
			t.Fatalf("unloading %s: %v", m, err)
		}
	}
	waitMetrics("the gap (ipvs problem, no table gauge)", func(m string) bool {
		return strings.Contains(m, problem) && !strings.Contains(m, "ipvs_guard_ipvs_virtual_servers ")
	})
	t.Logf("agent pid %d reports the gap: %s", pid, problem)
	guest.RequireNotLoaded(t, "ip_vs") // the agent (no --remediate) loaded nothing

	loadModules(t, "ip_vs", "ip_vs_rr")
	ipvsadm(t, "-A", "-t", "10.96.0.1:443", "-s", "rr")
	ipvsadm(t, "-A", "-t", "10.96.0.2:443", "-s", "rr")
	waitMetrics("the new table (2 virtual servers)", func(m string) bool {
		return strings.Contains(m, "ipvs_guard_ipvs_virtual_servers 2\n") && !strings.Contains(m, problem)
	})
	select {
	case err := <-done:
		t.Fatalf("the agent exited (%v)", err)
	default: // still the process started above
	}
	t.Logf("agent pid %d sees the reloaded table (2 virtual servers) without a restart", pid)
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("modprobe was executed: %q", calls)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestRunNotInIPVSMode runs the remediating agent against a real API server
// on a captured host without IPVS modules, next to a kube-proxy that is
// configured for and runs in nftables mode: the IPVS conditions are False
// with reason IPVSNotInUse, nothing is written, and resyncs post no Events.
// kube-proxy switched back to ipvs, the modules condition is True again.
func TestRunNotInIPVSMode(t *testing.T) {
	s, admin, root, health := startRunFixture(t)
	shipNFTablesModules(t, root)
	ctx := context.Background()
	kp, setMode := fakeKubeProxy(t, "nftables")

	runCtx, stop := context.WithCancel(ctx)
	code := make(chan int, 1)
	go func() {
		code <- execute(runCtx, []string{"run", "--kubeconfig", s.Kubeconfig, "--node-name", "node-a", "--root", root, "--remediate",
			"--kube-proxy-metrics-address", kp,
			"--health-probe-bind-address", health, "--metrics-bind-address", health, "--metrics-secure=false", "--resync-period", "1s"})
	}()
	defer func() {
		stop()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("exit code %d, want 0", c)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not stop within 10 s")
		}
	}()

	conditions := func() map[string]corev1.NodeCondition { return nodeConditions(t, admin) }
	events := func() int {
		list, err := admin.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range list.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == "node-a" {
				n++
			}
		}
		return n
	}
	ipvsConds := []string{"IPVSModulesMissing", "KubeProxyIPVSDegraded", "StrictARPDisabled"}
	notInUse := func(cs map[string]corev1.NodeCondition) bool {
		for _, ct := range ipvsConds {
			c, ok := cs[ct]
			if !ok || c.Status != corev1.ConditionFalse || c.Reason != check.ReasonIPVSNotInUse {
				return false
			}
		}
		return true
	}

	deadline := time.Now().Add(30 * time.Second)
	for !notInUse(conditions()) {
		if time.Now().After(deadline) {
			t.Fatalf("IPVS conditions never all False/%s: %+v", check.ReasonIPVSNotInUse, conditions())
		}
		select {
		case c := <-code:
			t.Fatalf("run exited early with %d", c)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, ct := range ipvsConds {
		t.Logf("%s: %s/%s: %s", ct, conditions()[ct].Status, conditions()[ct].Reason, conditions()[ct].Message)
	}
	// Several resyncs later: still not in use, no new Event, nothing written.
	before := events()
	time.Sleep(5 * time.Second)
	if cs := conditions(); !notInUse(cs) {
		t.Errorf("after resyncs: %+v", cs)
	}
	if after := events(); after != before {
		t.Errorf("%d Events about node-a during 5 resyncs in nftables mode, want none", after-before)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/modules-load.d/ipvs.conf")); err == nil {
		t.Error("the remediating agent declared the IPVS modules though kube-proxy runs in nftables mode")
	}

	// Back to IPVS: the next resyncs see it.
	setMode("ipvs")
	deadline = time.Now().Add(30 * time.Second)
	for {
		c := conditions()["IPVSModulesMissing"]
		if c.Status == corev1.ConditionTrue && c.Reason != check.ReasonIPVSNotInUse {
			t.Logf("back in ipvs mode: IPVSModulesMissing %s/%s", c.Status, c.Reason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("back in ipvs mode, IPVSModulesMissing = %+v", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

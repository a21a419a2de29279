// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/nftready"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// TestRunDataplaneConditionInNFTablesMode runs the agent against a real API
// server next to a kube-proxy configured for and running in nftables mode:
// KubeProxyIPVSDegraded says the IPVS prerequisites do not apply while
// KubeProxyDataplaneDegraded carries kube-proxy's health; a stall makes it
// True (KubeProxySyncStale) with KubeProxyIPVSDegraded untouched, and
// `cleanup` removes both.
func TestRunDataplaneConditionInNFTablesMode(t *testing.T) {
	s, admin, root, health := startRunFixture(t)
	shipNFTablesModules(t, root)
	ctx := context.Background()
	var stale atomic.Bool
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/proxyMode":
			fmt.Fprint(w, "nftables")
		case "/configz":
			fmt.Fprintf(w, `{"kubeproxy.config.k8s.io":{"mode":"nftables","healthzBindAddress":%q,"nftables":{"syncPeriod":"5s"}}}`, addr)
		case "/metrics":
			now := time.Now().Unix()
			last, queued := now-1, now-2
			if stale.Load() {
				// An update queued a second ago waits behind a sync
				// 30 s old: three health timeouts of 10 s.
				last, queued = now-30, now-1
			}
			fmt.Fprintf(w, "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} %d\nkubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} %d\n", last, queued)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr = strings.TrimPrefix(srv.URL, "http://")

	runCtx, stop := context.WithCancel(ctx)
	code := make(chan int, 1)
	go func() {
		code <- execute(runCtx, []string{"run", "--kubeconfig", s.Kubeconfig, "--node-name", "node-a", "--root", root,
			"--kube-proxy-metrics-address", addr, "--health-probe-bind-address", health, "--metrics-bind-address", health, "--metrics-secure=false", "--resync-period", "1s"})
	}()
	stopped := false
	stopRun := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("exit code %d, want 0", c)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not stop within 10 s")
		}
	}
	defer stopRun()

	conditions := func() map[string]corev1.NodeCondition { return nodeConditions(t, admin) }
	waitFor := func(what string, ok func(map[string]corev1.NodeCondition) bool) map[string]corev1.NodeCondition {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			cs := conditions()
			if ok(cs) {
				return cs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never; conditions %+v", what, cs)
			}
			select {
			case c := <-code:
				t.Fatalf("run exited early with %d", c)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	ipvs, dp := string(nodestatus.KubeProxyIPVSDegraded), string(nodestatus.KubeProxyDataplaneDegraded)
	cs := waitFor("KubeProxyDataplaneDegraded False/KubeProxySyncing, KubeProxyIPVSDegraded False/IPVSNotInUse", func(cs map[string]corev1.NodeCondition) bool {
		return cs[dp].Status == corev1.ConditionFalse && cs[dp].Reason == kubeproxy.ReasonSyncing &&
			cs[ipvs].Status == corev1.ConditionFalse && cs[ipvs].Reason == check.ReasonIPVSNotInUse
	})
	t.Logf("%s: %s/%s: %s", dp, cs[dp].Status, cs[dp].Reason, cs[dp].Message)

	// A hardening file blacklists a module kube-proxy's rules need: the
	// nftables-prerequisites check makes the condition True, naming the
	// file and the line, and False again once it is gone.
	blacklist := filepath.Join(root, "etc", "modprobe.d", "harden.conf")
	if err := os.MkdirAll(filepath.Dir(blacklist), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blacklist, []byte("blacklist nft_numgen\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cs = waitFor("KubeProxyDataplaneDegraded True/NFTablesModuleBlocked", func(cs map[string]corev1.NodeCondition) bool {
		return cs[dp].Status == corev1.ConditionTrue && cs[dp].Reason == nftready.ReasonModuleBlocked
	})
	t.Logf("blacklist → %s=True in %.1fs: %s", dp, time.Since(start).Seconds(), cs[dp].Message)
	if want := `nft_numgen, which kube-proxy's nftables rules need, is blocked by "blacklist nft_numgen" in /etc/modprobe.d/harden.conf`; !strings.Contains(cs[dp].Message, want) {
		t.Errorf("message lacks %q: %q", want, cs[dp].Message)
	}
	if err := os.Remove(blacklist); err != nil {
		t.Fatal(err)
	}
	waitFor("KubeProxyDataplaneDegraded False/KubeProxySyncing again", func(cs map[string]corev1.NodeCondition) bool {
		return cs[dp].Status == corev1.ConditionFalse && cs[dp].Reason == kubeproxy.ReasonSyncing
	})

	stale.Store(true)
	start = time.Now()
	cs = waitFor("KubeProxyDataplaneDegraded True/KubeProxySyncStale", func(cs map[string]corev1.NodeCondition) bool {
		return cs[dp].Status == corev1.ConditionTrue && cs[dp].Reason == kubeproxy.ReasonSyncStale
	})
	t.Logf("stall → %s=True in %.1fs: %s", dp, time.Since(start).Seconds(), cs[dp].Message)
	for _, w := range []string{"nftables mode", "its nftables table", "health timeout of 10s"} {
		if !strings.Contains(cs[dp].Message, w) {
			t.Errorf("message lacks %q: %q", w, cs[dp].Message)
		}
	}
	if c := cs[ipvs]; c.Status != corev1.ConditionFalse || c.Reason != check.ReasonIPVSNotInUse {
		t.Errorf("%s = %s/%s during the stall, want False/%s", ipvs, c.Status, c.Reason, check.ReasonIPVSNotInUse)
	}

	stopRun()
	if c := execute(ctx, []string{"cleanup", "--kubeconfig", s.Kubeconfig}); c != 0 {
		t.Fatalf("cleanup exit code %d", c)
	}
	cs = conditions()
	for _, ct := range nodestatus.AllConditionTypes() {
		if _, ok := cs[string(ct)]; ok {
			t.Errorf("after cleanup the Node still has %s", ct)
		}
	}
}

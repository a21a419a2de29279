// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// kpSyncPeriod is kube-proxy's --ipvs-sync-period here (its default is
// 30s): its health timeout, twice the sync period, is then 20 s, and the
// stall scenario takes seconds rather than minutes.
const kpSyncPeriod = 10 * time.Second

// stallClusterIP is the ClusterIP of the Service created while kube-proxy
// is stopped.
const stallClusterIP = "10.96.0.80"

// scenarioKubeProxyStall: kube-proxy stopped with SIGSTOP while a Service
// is created. Before: the agent reads kube-proxy's real /metrics and /livez
// (sync fresh, health timeout 2 × --ipvs-sync-period). Stopped: its metrics
// port accepts connections and never answers; once the last sync it
// reported is a health timeout old, KubeProxyDataplaneDegraded=True
// (KubeProxySyncStale) naming since when, while `ipvsadm -Ln` indeed lacks
// the new Service. SIGCONT: kube-proxy programs it and the condition goes
// back to False.
func (e *e2e) scenarioKubeProxyStall() {
	t, ctx := e.t, e.ctx
	e.begin("8. kube-proxy stalls (SIGSTOP) while a Service is created")
	timeout := 2 * kpSyncPeriod
	e.waitMetric("ipvs_guard_kube_proxy_health_timeout_seconds", nil, timeout.Seconds())
	e.waitMetric("ipvs_guard_kube_proxy_sync_stale", map[string]string{"ip_family": "IPv4"}, 0)
	e.waitCondition("KubeProxyDataplaneDegraded", corev1.ConditionFalse, "")
	e.tl.say("the agent reads kube-proxy's /metrics and /livez: IPv4 rules fresh, health timeout %s (2 × --ipvs-sync-period=%s)", timeout, kpSyncPeriod)
	// What the real kube-proxy leaves for the advisory check: the IPVS
	// sysctls as it sets them, and only IPVS's default TCP timeout (900 s)
	// below the kernel's keepalive time (7,200 s).
	for name, v := range map[string]float64{"net.ipv4.vs.expire_nodest_conn": 1, "net.ipv4.vs.expire_quiescent_template": 1, "net.ipv4.vs.conntrack": 1, "ipvs.timeout.tcp": 900, "net.ipv4.tcp_keepalive_time": 7200} {
		e.waitMetric("ipvs_guard_sysctl_value", map[string]string{"sysctl": name}, v)
	}
	e.waitMetric("ipvs_guard_advisory", map[string]string{"check": "ipvs-sysctls", "advisory": "IPVSTCPTimeoutBelowKeepalive", "severity": "warning"}, 1)
	if n := e.countSeries("ipvs_guard_advisory"); n != 1 {
		t.Errorf("%d advisories with the real kube-proxy's settings, want 1 (IPVSTCPTimeoutBelowKeepalive)", n)
	}
	e.tl.say("ipvs-sysctls: kube-proxy set expire_nodest_conn, expire_quiescent_template and conntrack to 1; the one advisory is IPVSTCPTimeoutBelowKeepalive (ipvsadm's TCP timeout 900 s < tcp_keepalive_time 7200 s)")

	out := e.g.run(ctx, t, `p=$(kp_pid) && [ -n "$p" ] && kill -STOP $p && echo "$p $(uptime_s)"`)
	stopped := time.Now()
	e.tl.say("SIGSTOP to kube-proxy (pid %s)", strings.Fields(out)[0])
	stall := service{name: "stall", typ: corev1.ServiceTypeClusterIP, clusterIP: stallClusterIP, port: 80, endpoint: "10.244.0.13"}
	if err := createService(ctx, e.cs, "default", stall); err != nil {
		t.Fatal(err)
	}
	e.tl.say("created default/stall (ClusterIP %s) while kube-proxy is stopped", stallClusterIP)

	c := e.waitCondition("KubeProxyDataplaneDegraded", corev1.ConditionTrue, "KubeProxySyncStale")
	detected := time.Since(stopped)
	for _, s := range []string{"not synced ipvs rules since", "health timeout of " + timeout.String(), "has not answered since"} {
		if !strings.Contains(c.Message, s) {
			t.Errorf("KubeProxyDataplaneDegraded message lacks %q: %q", s, c.Message)
		}
	}
	// The verdict against the table of the same moment.
	if _, code, err := e.g.Exec(ctx, `kp_table_has `+stallClusterIP); err != nil || code == 0 {
		t.Errorf("ipvsadm -Ln has %s while kube-proxy is stopped (exit %d, %v)", stallClusterIP, code, err)
	}
	e.waitMetric("ipvs_guard_kube_proxy_sync_stale", map[string]string{"ip_family": "IPv4"}, 1)
	e.tl.say("KubeProxyDataplaneDegraded=True (KubeProxySyncStale) %.1fs after SIGSTOP (health timeout %s, agent resync %s): %q",
		detected.Seconds(), timeout, resync, c.Message)
	e.tl.say("ipvsadm -Ln has no virtual server for %s; ipvs_guard_kube_proxy_sync_stale{ip_family=\"IPv4\"} 1", stallClusterIP)
	e.figures = append(e.figures, fmt.Sprintf("kube-proxy SIGSTOP → KubeProxyDataplaneDegraded=True (KubeProxySyncStale): %.1fs (kube-proxy's health timeout %s; agent resync %s)",
		detected.Seconds(), timeout, resync))

	e.g.run(ctx, t, `kill -CONT $(kp_pid)`)
	resumed := time.Now()
	e.g.run(ctx, t, `kp_wait_table 120 `+stallClusterIP)
	programmed := time.Since(resumed)
	e.waitCondition("KubeProxyDataplaneDegraded", corev1.ConditionFalse, "")
	back := time.Since(resumed)
	e.tl.say("SIGCONT: kube-proxy programmed %s %.1fs later; KubeProxyDataplaneDegraded=False %.1fs after SIGCONT", stallClusterIP, programmed.Seconds(), back.Seconds())
	e.figures = append(e.figures, fmt.Sprintf("kube-proxy SIGCONT → KubeProxyDataplaneDegraded=False: %.1fs (table programmed after %.1fs)", back.Seconds(), programmed.Seconds()))
	if err := deleteService(ctx, e.cs, "default", "stall"); err != nil {
		t.Fatal(err)
	}
}

// countSeries returns how many series of name the agent's /metrics has.
func (e *e2e) countSeries(name string) int {
	mfs, err := scrape(e.ctx, e.metrics)
	if err != nil {
		e.t.Fatal(err)
	}
	if mf, ok := mfs[name]; ok {
		return len(mf.GetMetric())
	}
	return 0
}

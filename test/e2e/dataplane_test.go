// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The IPVS table against the cluster (the ipvs-dataplane check), with the
// real kube-proxy stopped (SIGSTOP) where a fault must outlive its next sync.
const (
	dpClusterIP  = "10.96.0.80"
	dpEndpoint   = "10.244.0.20"
	dpForeignRS  = "10.244.0.99"
	dnsClusterIP = "10.96.0.90"
	dnsEndpoint  = "10.244.0.30"
	dnsEndpoint2 = "10.244.0.31"
	// dataplaneWait bounds a wait for a data-plane verdict: the settle grace
	// (30 s), a confirming read, and a second settle for a finding that only
	// the confirming read shows (connections to a gone backend), at a 10 s
	// resync.
	dataplaneWait = 4 * time.Minute
)

// scenarioDataplane runs the three data-plane faults in order.
func (e *e2e) scenarioDataplane() {
	e.scenarioStaleAndMissingRealServers()
	e.scenarioGhostVirtualServer()
	e.scenarioUDPToGoneBackend()
}

// scenarioStaleAndMissingRealServers: kube-proxy stopped, a real server
// added and kube-proxy's own deleted with ipvsadm: KubeProxyDataplaneDegraded
// True (StaleRealServers), both counted; kube-proxy resumed: False.
func (e *e2e) scenarioStaleAndMissingRealServers() {
	t, ctx := e.t, e.ctx
	e.begin("9. A real server added and one deleted by hand (ipvsadm) while kube-proxy is stopped")
	dp := service{name: "dp", typ: corev1.ServiceTypeClusterIP, clusterIP: dpClusterIP, port: 80, endpoint: dpEndpoint}
	if err := createService(ctx, e.cs, "default", dp); err != nil {
		t.Fatal(err)
	}
	e.waitGuest(3*time.Minute, `kp_table_has `+dpClusterIP+` && ipvsadm -Ln -t `+dpClusterIP+`:80 | grep -qF `+dpEndpoint+`:8080`)
	e.tl.say("created default/dp %s:80 → %s:8080; kube-proxy programmed it", dpClusterIP, dpEndpoint)
	e.g.run(ctx, t, `kill -STOP $(pidof kube-proxy) && ipvsadm -a -t `+dpClusterIP+`:80 -r `+dpForeignRS+`:8080 -m -w 1 && ipvsadm -d -t `+dpClusterIP+`:80 -r `+dpEndpoint+`:8080`)
	faultAt := time.Now()
	e.tl.say("kube-proxy stopped (SIGSTOP); ipvsadm -a %s:8080 (no endpoint) and ipvsadm -d %s:8080 (the ready endpoint)", dpForeignRS, dpEndpoint)
	stale := "real server " + dpForeignRS + ":8080 of " + dpClusterIP + ":80/TCP of default/dp (weight 1) is no ready endpoint"
	missing := "ready endpoint " + dpEndpoint + ":8080 of default/dp has no real server"
	// The message, not only the reason: a check before this one (kube-proxy
	// stopped) may give the condition its reason too.
	e.pollFor(dataplaneWait, "KubeProxyDataplaneDegraded=True naming the stale and the missing real server", func() (bool, string) {
		c := e.condition("KubeProxyDataplaneDegraded")
		return c.Status == corev1.ConditionTrue && strings.Contains(c.Message, stale) && strings.Contains(c.Message, missing),
			fmt.Sprintf("%s (%s) %q", c.Status, c.Reason, c.Message)
	})
	took := time.Since(faultAt)
	c := e.condition("KubeProxyDataplaneDegraded")
	table := e.g.run(ctx, t, `ipvsadm -Ln -t `+dpClusterIP+`:80`)
	if !strings.Contains(table, dpForeignRS+":8080") || strings.Contains(table, dpEndpoint+":8080") {
		t.Errorf("ipvsadm -Ln at the same moment disagrees with the verdict:\n%s", table)
	}
	e.tl.say("KubeProxyDataplaneDegraded=True (%s) %.0f s after the fault: %q", c.Reason, took.Seconds(), c.Message)
	e.tl.detail("ipvsadm -Ln -t %s:80 at that moment:\n%s", dpClusterIP, strings.TrimSpace(table))
	e.figures = append(e.figures, fmt.Sprintf("stale and missing real servers (ipvsadm) → KubeProxyDataplaneDegraded=True: %.0f s (settle 30 s + a confirming read, resync %s)", took.Seconds(), resync))
	e.waitMetric("ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "stale-real-server"}, 1)
	e.waitMetric("ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "missing-real-server"}, 1)

	e.g.run(ctx, t, `kill -CONT $(pidof kube-proxy)`)
	e.tl.say("kube-proxy resumed (SIGCONT)")
	e.pollFor(dataplaneWait, "KubeProxyDataplaneDegraded=False once kube-proxy resynced", func() (bool, string) {
		c := e.condition("KubeProxyDataplaneDegraded")
		return c.Status == corev1.ConditionFalse, fmt.Sprintf("%s (%s) %q", c.Status, c.Reason, c.Message)
	})
	e.tl.say("kube-proxy's next sync put the table back: KubeProxyDataplaneDegraded=False; ipvsadm -Ln -t %s:80: %s", dpClusterIP,
		strings.Join(strings.Fields(e.g.run(ctx, t, `ipvsadm -Ln -t `+dpClusterIP+`:80 | tail -n +4`)), " "))
}

// scenarioGhostVirtualServer: the Service deleted while kube-proxy is
// stopped: its virtual server and kube-ipvs0 address are ghosts (an
// advisory: the condition stays False); kube-proxy resumed: gone.
func (e *e2e) scenarioGhostVirtualServer() {
	t, ctx := e.t, e.ctx
	e.begin("10. A Service deleted while kube-proxy is stopped: a ghost virtual server and address")
	// Whatever kube-proxy had left behind is gone once it has resynced.
	e.pollFor(dataplaneWait, "no ghost before the fault", func() (bool, string) {
		mfs, err := scrape(ctx, e.metrics)
		if err != nil {
			return false, err.Error()
		}
		vs, _ := sample(mfs, "ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "ghost-virtual-server"})
		addr, _ := sample(mfs, "ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "ghost-address"})
		return vs == 0 && addr == 0, fmt.Sprintf("ghost-virtual-server %v, ghost-address %v", vs, addr)
	})
	e.g.run(ctx, t, `kill -STOP $(pidof kube-proxy)`)
	if err := deleteService(ctx, e.cs, "default", "dp"); err != nil {
		t.Fatal(err)
	}
	faultAt := time.Now()
	e.tl.say("kube-proxy stopped (SIGSTOP); deleted default/dp")
	e.pollFor(dataplaneWait, "ghost-virtual-server and ghost-address findings", func() (bool, string) {
		mfs, err := scrape(ctx, e.metrics)
		if err != nil {
			return false, err.Error()
		}
		vs, _ := sample(mfs, "ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "ghost-virtual-server"})
		addr, _ := sample(mfs, "ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "ghost-address"})
		return vs == 1 && addr == 1, fmt.Sprintf("ghost-virtual-server %v, ghost-address %v", vs, addr)
	})
	took := time.Since(faultAt)
	now := e.g.run(ctx, t, `ipvsadm -Ln -t `+dpClusterIP+`:80; /usr/sbin/ip -o addr show dev kube-ipvs0 | grep -F "inet `+dpClusterIP+`/"`)
	if !strings.Contains(now, dpClusterIP+":80") || !strings.Contains(now, "inet "+dpClusterIP+"/") {
		t.Errorf("ipvsadm and kube-ipvs0 at the same moment show no ghost:\n%s", now)
	}
	if c := e.condition("KubeProxyDataplaneDegraded"); strings.Contains(c.Message, "belongs to no Service") || strings.Contains(c.Message, "is no Service's VIP") {
		t.Errorf("a ghost is an advisory, but KubeProxyDataplaneDegraded names it: %s (%s) %q", c.Status, c.Reason, c.Message)
	}
	e.tl.say("ghosts counted %.0f s after the delete (an advisory: no condition names them); at that moment:", took.Seconds())
	e.tl.detail("%s", strings.TrimSpace(now))
	e.figures = append(e.figures, fmt.Sprintf("Service deleted while kube-proxy stopped → ghost virtual server and address counted: %.0f s", took.Seconds()))
	e.g.run(ctx, t, `kill -CONT $(pidof kube-proxy)`)
	e.waitMetric("ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "ghost-virtual-server"}, 0)
	e.waitMetric("ipvs_guard_ipvs_drift_findings", map[string]string{"kind": "ghost-address"}, 0)
	e.tl.say("kube-proxy resumed and removed them: both counts back to 0")
}

// scenarioUDPToGoneBackend: a UDP flow through a VIP (a DNS query from the
// node) to a backend that is then removed from the Service: kube-proxy
// deletes the UDP real server at once, the connection entry outlives it and
// is counted for the Service.
func (e *e2e) scenarioUDPToGoneBackend() {
	t, ctx := e.t, e.ctx
	e.begin("11. A UDP flow through a VIP to a backend that is then removed")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: dnsClusterIP, Selector: map[string]string{"app": "dns"},
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)}}},
	}
	if _, err := e.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := func(ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "dns-e2e", Namespace: "default", Labels: map[string]string{
				discoveryv1.LabelServiceName: "dns", discoveryv1.LabelManagedBy: "e2e"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)}},
		}
	}
	created, err := e.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice(dnsEndpoint), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitGuest(3*time.Minute, `ipvsadm -Ln -u `+dnsClusterIP+`:53 | grep -qF `+dnsEndpoint+`:53`)
	// kube-proxy sets net.ipv4.vs.expire_nodest_conn=1, and since Linux 5.9
	// the kernel then drops the entries of a deleted real server by itself
	// (a delayed work queued on the delete): the entries outlive their
	// backend where the sysctl is 0 (reset by a tuning profile, or an older
	// kube-proxy), as here, or where the real server stays at weight 0.
	e.g.run(ctx, t, `sysctl -w net.ipv4.vs.expire_nodest_conn=0 >/dev/null`)
	e.g.run(ctx, t, `timeout 3 nslookup example.invalid `+dnsClusterIP+` >/dev/null 2>&1; true`)
	conns := e.g.run(ctx, t, `ipvsadm -Lnc | grep -F "`+dnsClusterIP+`:53" | grep -F "`+dnsEndpoint+`:53"`)
	if strings.TrimSpace(conns) == "" {
		t.Fatalf("the DNS query made no IPVS connection entry to %s:53:\n%s", dnsEndpoint, e.g.run(ctx, t, `ipvsadm -Lnc`))
	}
	e.tl.say("net.ipv4.vs.expire_nodest_conn=0; default/dns %s:53/UDP → %s:53; a DNS query from the node made %d connection entr(ies)", dnsClusterIP, dnsEndpoint, len(strings.Split(strings.TrimSpace(conns), "\n")))
	upd := slice(dnsEndpoint2)
	upd.ResourceVersion = created.ResourceVersion
	if _, err := e.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	faultAt := time.Now()
	e.waitGuest(3*time.Minute, `! ipvsadm -Ln -u `+dnsClusterIP+`:53 | grep -qF `+dnsEndpoint+`:53`)
	e.tl.say("endpoint %s replaced by %s: kube-proxy deleted the UDP real server at once", dnsEndpoint, dnsEndpoint2)
	var got float64
	e.pollFor(dataplaneWait, "ipvs_guard_ipvs_gone_backend_connections{service=default/dns,protocol=UDP} > 0", func() (bool, string) {
		mfs, err := scrape(ctx, e.metrics)
		if err != nil {
			return false, err.Error()
		}
		v, ok := sample(mfs, "ipvs_guard_ipvs_gone_backend_connections", map[string]string{"service": "default/dns", "protocol": "UDP"})
		got = v
		return ok && v > 0, fmt.Sprintf("%v (present %v)", v, ok)
	})
	took := time.Since(faultAt)
	now := e.g.run(ctx, t, `ipvsadm -Lnc | grep -F "`+dnsClusterIP+`:53" | grep -F "`+dnsEndpoint+`:53"; true`)
	n := 0
	if s := strings.TrimSpace(now); s != "" {
		n = len(strings.Split(s, "\n"))
	}
	if float64(n) != got {
		t.Errorf("the agent counts %v connection entries to the gone %s:53, ipvsadm -Lnc at the same moment %d:\n%s", got, dnsEndpoint, n, now)
	}
	e.tl.say("%v UDP connection entr(ies) of default/dns to the gone %s:53 counted %.0f s after the change; ipvsadm -Lnc:", got, dnsEndpoint, took.Seconds())
	e.tl.detail("%s", strings.TrimSpace(now))
	e.figures = append(e.figures, fmt.Sprintf("UDP backend removed → its connection entries counted for the Service: %.0f s (ipvsadm -Lnc agrees: %d)", took.Seconds(), n))
	e.g.run(ctx, t, `sysctl -w net.ipv4.vs.expire_nodest_conn=1 >/dev/null`)
	if err := e.cs.CoreV1().Services("default").Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, "dns-e2e", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pollFor is poll with its own deadline.
func (e *e2e) pollFor(d time.Duration, what string, f func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := f()
		if ok {
			return
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("waiting for %s: gave up after %s; last seen: %s\nagent log:\n%s", what, d, state, e.guestLog("agent", 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
)

// The scenario's cluster, dual-stack with IPv4 primary. The guest is
// 10.0.2.15 and fec0::15 on QEMU's user network, where 10.0.2.2 is the
// host; QEMU answers ARP and neighbour solicitations only for its own
// addresses (10.0.2.2, 10.0.2.3, fec0::2, fec0::3), so a LoadBalancer IP on
// that segment is one nobody answers.
const (
	nodeName      = "guest"
	nodeIP        = "10.0.2.15"
	nodeIP6       = "fec0::15"
	hostFromGuest = "10.0.2.2"
	webClusterIP  = "10.96.0.50"
	shopClusterIP = "10.96.0.60"
	silentLBIP    = "10.0.2.100"
	// The dual-stack LoadBalancer of scenario 6: IPv6 ingress only.
	cartClusterIP  = "10.96.0.70"
	cartClusterIP6 = "fd00:10:96::70"
	silentLBIP6    = "fec0::100"
	// clusterCIDRs are the cluster's Pod ranges, one per family (the
	// Service ranges are apiservertest.DualStackServiceCIDR).
	clusterCIDRs = "10.244.0.0/16,fd00:10:244::/64"
	agentNS      = "ipvs-guard"
	agentDS      = "ipvs-guard"
	// resync is the agent's --resync-period here (the chart's default is 1m):
	// kernel state such as a sysctl kube-proxy flips has no watch.
	resync = "10s"
	// waitFor bounds each wait for the agent to publish a change.
	waitFor = 2 * time.Minute
)

// e2e is one run: the API server, the guest node and the story so far.
type e2e struct {
	t       *testing.T
	ctx     context.Context
	cs      kubernetes.Interface
	g       *guest
	tl      *timeline
	metrics string

	step    string         // the scenario step running, named when the run fails
	agent   agentContainer // the shipped DaemonSet's container
	kpFlags []string
	figures []string
}

func TestE2E(t *testing.T) {
	guestURL, metricsURL := os.Getenv("E2E_GUEST_URL"), os.Getenv("E2E_METRICS_URL")
	testenv.Require(t, guestURL != "" && metricsURL != "",
		"needs the guest node booted by hack/e2e/run.sh (make test-e2e)")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	e := &e2e{t: t, ctx: ctx, g: newGuest(guestURL), tl: newTimeline(os.Stdout), metrics: metricsURL}
	t.Cleanup(e.finish)

	e.begin("Setting up: a real kube-apiserver %s + etcd on the host, the node \"guest\" in QEMU", apiservertest.KubeVersion)
	srv := apiservertest.Start(t, apiservertest.Options{ServiceCIDR: apiservertest.DualStackServiceCIDR})
	cs, err := kubernetes.NewForConfig(srv.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	e.cs = cs
	e.tl.say("kube-apiserver ready at %s (the guest reaches it as https://%s)", srv.URL, hostFromGuest)
	e.setupCluster(srv)

	e.scenarioModules()
	if os.Getenv("E2E_STORY") == "short" {
		// make demo's short story (hack/e2e/run.sh --demo): the modules
		// found missing by a report-only agent, then loaded and declared
		// by the remediating one; make demo-full tells the whole timeline.
		e.waitEvents("IPVSModulesMissing", map[string]int{"Warning": 1, "Normal": 1})
		e.stopAgentTimed("remediating agent")
		e.tl.say("the short story ends here; make demo-full (or make test-e2e) goes on with kube-proxy's table, LoadBalancer IPs, strict ARP, IPv6, a kube-proxy stall and the data plane")
		return
	}
	e.scenarioKubeProxyUp()
	e.scenarioSilentLoadBalancer()
	e.scenarioStrictARPOn()
	e.scenarioServiceGone()
	e.scenarioSilentIPv6LoadBalancer()
	e.scenarioIPv6ServiceGone()
	e.scenarioKubeProxyStall()
	e.scenarioDataplane()
	e.stopAgent()
}

func (e *e2e) setupCluster(srv *apiservertest.Server) {
	t, ctx := e.t, e.ctx
	_, file, _, _ := runtime.Caller(0)
	manifest := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "manifests", "ipvs-guard.yaml")
	n, err := applyManifest(ctx, srv.AdminConfig(), manifest)
	if err != nil {
		t.Fatal(err)
	}
	e.tl.say("applied deploy/manifests/ipvs-guard.yaml: %d objects (namespace, ServiceAccount, RBAC, admission policy, DaemonSet, …)", n)
	if err := createNode(ctx, e.cs, nodeName, nodeIP, nodeIP6); err != nil {
		t.Fatal(err)
	}
	e.tl.say("registered Node %q (%s and %s, Ready) as its kubelet would", nodeName, nodeIP, nodeIP6)
	web := service{name: "web", typ: corev1.ServiceTypeClusterIP, clusterIP: webClusterIP, port: 80, endpoint: "10.244.0.10"}
	if err := createService(ctx, e.cs, "default", web); err != nil {
		t.Fatal(err)
	}
	e.tl.say("created ClusterIP Service default/web %s:80 with one ready endpoint", webClusterIP)

	pod, ac, err := agentPod(ctx, e.cs, agentNS, agentDS, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	e.agent = ac
	agentTok, err := podToken(ctx, e.cs, pod)
	if err != nil {
		t.Fatal(err)
	}
	kpTok, err := kubeProxyToken(ctx, e.cs)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + hostFromGuest + ":" + u.Port()
	agentKC, err := guestKubeconfig(server, ca, "ipvs-guard", agentTok)
	if err != nil {
		t.Fatal(err)
	}
	kpKC, err := guestKubeconfig(server, ca, "kube-proxy", kpTok)
	if err != nil {
		t.Fatal(err)
	}
	e.tl.say("agent identity: a token of ServiceAccount ipvs-guard bound to Pod %s on node %s (the DaemonSet's pod; its node-name claim is what the admission policy checks)", pod.Name, nodeName)

	go e.tl.watch(ctx, e.cs, nodeName)

	if err := e.g.waitReady(ctx, 6*time.Minute); err != nil {
		t.Fatal(err)
	}
	e.g.run(ctx, t, fmt.Sprintf("cat >/run/e2e/agent.kubeconfig <<'EOF'\n%s\nEOF\ncat >/run/e2e/kube-proxy.kubeconfig <<'EOF'\n%s\nEOF\n", agentKC, kpKC))
	// The node's IPv6 address, static as on a server (nodad: QEMU's network
	// holds no other host that could have it).
	e.g.run(ctx, t, `/usr/sbin/ip -6 addr add `+nodeIP6+`/64 dev eth0 nodad && /usr/sbin/ip -6 addr show dev eth0 | grep -qF "inet6 `+nodeIP6+`/64"`)
	up := e.g.run(ctx, t, `echo "$(uname -r) $(uptime_s)"`)
	e.tl.say("guest node is up: Debian kernel %s, eth0 %s/24 and %s/64", strings.Fields(up)[0], nodeIP, nodeIP6)
}

// scenarioModules: scheduler lc with ip_vs_lc missing → IPVSModulesMissing
// True + one Warning Event (report-only agent) → remediation on → False + one
// Normal Event.
func (e *e2e) scenarioModules() {
	t, ctx := e.t, e.ctx
	e.begin("1. kube-proxy wants the lc scheduler; ip_vs_lc is not loaded")
	e.g.run(ctx, t, `/usr/libexec/kmod/modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack &&
printf 'ip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n' >/etc/modules-load.d/ipvs.conf`)
	e.tl.say("the node's admin loaded ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh and nf_conntrack by hand and listed them in /etc/modules-load.d/ipvs.conf")

	e.startKubeProxy(false)
	out := e.waitGuest(90*time.Second, `[ "$(kp_starts)" -ge 2 ] && grep -m2 -E "Could not create dummy VS|can't use the IPVS proxier" /run/e2e/kube-proxy.log`)
	e.tl.say("kube-proxy exits (and is restarted every few seconds, as kubelet would); its log says:")
	e.tl.detail("%s", klogMessage(out))

	e.startAgent(false)
	c := e.waitCondition("IPVSModulesMissing", corev1.ConditionTrue, "")
	if !strings.Contains(c.Message, "ip_vs_lc") {
		t.Errorf("IPVSModulesMissing message does not name ip_vs_lc: %q", c.Message)
	}
	e.waitEvents("IPVSModulesMissing", map[string]int{"Warning": 1})
	e.waitMetric("ipvs_guard_modules_loaded", map[string]string{"module": "ip_vs_lc"}, 0)
	e.tl.say("/metrics: ipvs_guard_modules_loaded{module=\"ip_vs_lc\"} 0")
	e.g.run(ctx, t, `! grep -q '^ip_vs_lc ' /proc/modules && ! grep -qx ip_vs_lc /etc/modules-load.d/ipvs.conf`)
	e.tl.say("report-only: nothing loaded, nothing written")
	e.stopAgentTimed("report-only agent")

	e.begin("2. Remediation on (the chart's default: remediation.enabled=true)")
	e.startAgent(true)
	e.waitCondition("IPVSModulesMissing", corev1.ConditionFalse, "")
	e.waitEvents("IPVSModulesMissing", map[string]int{"Warning": 1, "Normal": 1})
	e.g.run(ctx, t, `grep -q '^ip_vs_lc ' /proc/modules && grep -qx ip_vs_lc /etc/modules-load.d/ipvs.conf`)
	e.tl.say("the agent loaded ip_vs_lc itself (finit_module, no modprobe) and added it to /etc/modules-load.d/ipvs.conf")
	e.waitMetric("ipvs_guard_modules_loaded", map[string]string{"module": "ip_vs_lc"}, 1)
}

// scenarioKubeProxyUp: with ip_vs_lc loaded, kube-proxy comes up in IPVS mode
// and programs the table.
func (e *e2e) scenarioKubeProxyUp() {
	t, ctx := e.t, e.ctx
	out := e.g.run(ctx, t, `kp_wait_table 180 `+webClusterIP)
	secs := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "programmed"))
	mode := strings.TrimSpace(e.g.run(ctx, t, `wget -qO- http://127.0.0.1:10249/proxyMode`))
	if mode != "ipvs" {
		t.Errorf("kube-proxy /proxyMode = %q, want ipvs", mode)
	}
	starts := strings.TrimSpace(e.g.run(ctx, t, `kp_starts`))
	stack := strings.TrimSpace(e.g.run(ctx, t, `grep -c "kube-proxy running in dual-stack mode" /run/e2e/kube-proxy.log || true`))
	if stack == "0" {
		t.Errorf("kube-proxy does not run dual-stack; its log:\n%s", e.guestLog("kube-proxy", 40))
	}
	e.tl.say("kube-proxy (start #%s) runs dual-stack: /proxyMode=%s, IPVS table programmed %ss after it started", starts, mode, secs)
	e.figures = append(e.figures, fmt.Sprintf("kube-proxy start → programmed IPVS table: %ss (start #%s)", secs, starts))
	e.tl.detail("%s", e.g.run(ctx, t, `ipvsadm -Ln | sed -n '3,$p'`))
}

// scenarioSilentLoadBalancer: a LoadBalancer IP nobody answers lands on
// kube-ipvs0 with strict ARP off → StrictARPDisabled and LoadBalancerARPFailing.
func (e *e2e) scenarioSilentLoadBalancer() {
	t, ctx := e.t, e.ctx
	e.begin("3. A LoadBalancer IP that nobody answers, and strict ARP off")
	shop := service{name: "shop", typ: corev1.ServiceTypeLoadBalancer, clusterIP: shopClusterIP, port: 80, lbIP: silentLBIP, endpoint: "10.244.0.11"}
	if err := createService(ctx, e.cs, "default", shop); err != nil {
		t.Fatal(err)
	}
	e.tl.say("created LoadBalancer default/shop with ingress IP %s (as MetalLB would assign it; no speaker announces it)", silentLBIP)
	e.g.run(ctx, t, `kp_wait_table 120 `+shopClusterIP+` `+silentLBIP)
	sys := e.g.run(ctx, t, `echo "arp_ignore=$(cat /proc/sys/net/ipv4/conf/all/arp_ignore) arp_announce=$(cat /proc/sys/net/ipv4/conf/all/arp_announce)"`)
	e.tl.say("kube-proxy bound %s to kube-ipvs0; net.ipv4.conf.all: %s", silentLBIP, strings.TrimSpace(sys))

	e.waitCondition("StrictARPDisabled", corev1.ConditionTrue, "")
	e.waitEvents("StrictARPDisabled", map[string]int{"Warning": 1})
	c := e.waitCondition("LoadBalancerARPFailing", corev1.ConditionTrue, "ARPNoReply")
	if !strings.Contains(c.Message, silentLBIP) {
		t.Errorf("LoadBalancerARPFailing message does not name %s: %q", silentLBIP, c.Message)
	}
	e.waitEvents("LoadBalancerARPFailing", map[string]int{"Warning": 1})
	e.waitMetric("ipvs_guard_arp_probe_result", map[string]string{"ip": silentLBIP, "result": "no-reply"}, 1)
	e.tl.say("/metrics: ipvs_guard_arp_probe_result{ip=%q,result=\"no-reply\"} 1", silentLBIP)
	e.waitMetric("ipvs_guard_node_condition_status", map[string]string{"condition": "StrictARPDisabled", "status": "True"}, 1)
}

// scenarioStrictARPOn: kube-proxy with --ipvs-strict-arp=true sets the
// sysctls → StrictARPDisabled False + one Normal Event.
func (e *e2e) scenarioStrictARPOn() {
	t, ctx := e.t, e.ctx
	e.begin("4. The fix for strict ARP: kube-proxy --ipvs-strict-arp=true")
	e.g.run(ctx, t, `kp_stop`)
	e.startKubeProxy(true)
	e.waitGuest(120*time.Second, `[ "$(cat /proc/sys/net/ipv4/conf/all/arp_ignore)" = 1 ] && [ "$(cat /proc/sys/net/ipv4/conf/all/arp_announce)" = 2 ]`)
	e.tl.say("kube-proxy set net.ipv4.conf.all.arp_ignore=1 and arp_announce=2")
	e.waitCondition("StrictARPDisabled", corev1.ConditionFalse, "")
	e.waitEvents("StrictARPDisabled", map[string]int{"Warning": 1, "Normal": 1})
}

// scenarioServiceGone: the silent LoadBalancer is deleted → its IP leaves
// /metrics and LoadBalancerARPFailing goes False.
func (e *e2e) scenarioServiceGone() {
	t, ctx := e.t, e.ctx
	e.begin("5. The LoadBalancer Service is deleted")
	if err := deleteService(ctx, e.cs, "default", "shop"); err != nil {
		t.Fatal(err)
	}
	e.tl.say("deleted default/shop")
	e.waitCondition("LoadBalancerARPFailing", corev1.ConditionFalse, "")
	e.waitEvents("LoadBalancerARPFailing", map[string]int{"Warning": 1, "Normal": 1})
	e.poll("the ARP series of "+silentLBIP+" to vanish from /metrics", func() (bool, string) {
		mfs, err := scrape(ctx, e.metrics)
		if err != nil {
			return false, err.Error()
		}
		return !hasSeries(mfs, "ipvs_guard_arp_probe_result", "ip", silentLBIP), "still there"
	})
	e.tl.say("/metrics no longer has any series for %s", silentLBIP)
}

// scenarioSilentIPv6LoadBalancer: a dual-stack LoadBalancer whose ingress
// IP is an IPv6 address nobody answers. kube-proxy (dual-stack) binds it to
// kube-ipvs0 and programs a v6 virtual server; the agent probes it with
// neighbour solicitations (LoadBalancerARPFailing, NDP, family ipv6), finds
// the v6 table complete, and leaves the IPv6 VIP out of the ARP sysctls: with
// arp_ignore/arp_announce back at 0/0 and only an IPv6 LoadBalancer IP on
// kube-ipvs0, StrictARPDisabled stays False.
func (e *e2e) scenarioSilentIPv6LoadBalancer() {
	t, ctx := e.t, e.ctx
	e.begin("6. A dual-stack LoadBalancer whose IPv6 ingress IP nobody answers")
	cart := service{
		name: "cart", typ: corev1.ServiceTypeLoadBalancer, clusterIP: cartClusterIP, clusterIP6: cartClusterIP6,
		port: 80, lbIP: silentLBIP6, endpoint: "10.244.0.12", endpoint6: "fd00:10:244::12",
	}
	created := time.Now()
	if err := createService(ctx, e.cs, "default", cart); err != nil {
		t.Fatalf("step 6, creating the dual-stack Service: %v", err)
	}
	e.tl.say("created LoadBalancer default/cart (ipFamilyPolicy RequireDualStack: ClusterIPs %s and %s) with IPv6 ingress IP %s and a ready endpoint per family", cartClusterIP, cartClusterIP6, silentLBIP6)

	// kube-proxy now syncs both families; under TCG on a loaded host it took
	// 80 s here. 170 s stays within the control endpoint's 3-minute answer.
	out, code, err := e.g.Exec(ctx, `kp_wait_table 170 `+cartClusterIP+` `+cartClusterIP6+` `+silentLBIP6)
	if err != nil || code != 0 {
		t.Fatalf("step 6, kube-proxy programming the IPv6 VIPs: exit %d, %v:\n%s", code, err, out)
	}
	// The virtual server can be in the table a moment before its real
	// server (kube-proxy adds them one after the other): wait for both.
	var vs string
	e.poll("the IPv6 virtual server ["+silentLBIP6+"]:80 with its real server [fd00:10:244::12]:8080", func() (bool, string) {
		vs = e.g.run(ctx, t, `ipvsadm -Ln -t '[`+silentLBIP6+`]:80' && /usr/sbin/ip -6 -o addr show dev kube-ipvs0 | grep -F "inet6 `+silentLBIP6+`/"`)
		return strings.Contains(vs, "[fd00:10:244::12]:8080"), vs
	})
	e.tl.say("kube-proxy bound %s to kube-ipvs0 and programmed the IPv6 virtual server:", silentLBIP6)
	e.tl.detail("%s", strings.TrimSpace(vs))

	c := e.waitCondition("LoadBalancerARPFailing", corev1.ConditionTrue, "ARPNoReply")
	if !strings.Contains(c.Message, silentLBIP6) || !strings.Contains(c.Message, "NDP") {
		t.Errorf("step 6: LoadBalancerARPFailing message does not name %s probed with NDP: %q", silentLBIP6, c.Message)
	}
	e.tl.say("LoadBalancerARPFailing=True (ARPNoReply): %s", c.Message)
	e.waitEvents("LoadBalancerARPFailing", map[string]int{"Warning": 2, "Normal": 1})
	e.waitMetric("ipvs_guard_arp_probe_result", map[string]string{"family": "ipv6", "ip": silentLBIP6, "result": "no-reply"}, 1)
	e.tl.say("/metrics: ipvs_guard_arp_probe_result{family=\"ipv6\",ip=%q,result=\"no-reply\"} 1", silentLBIP6)

	// The ipvs check compares the v6 virtual servers with the Service's v6
	// VIPs. A missing one counts only once it has been missing for the
	// settle time, so the verdict that matters is from a run started after
	// that time has passed since the Service appeared and after kube-proxy
	// programmed the v6 table.
	if d := ipvscheck.DefaultSettle + 5*time.Second - time.Since(created); d > 0 {
		time.Sleep(d)
	}
	e.waitNextRun("ipvs")
	e.waitMetric("ipvs_guard_check_status", map[string]string{"check": "ipvs", "status": "ok"}, 1)
	e.waitCondition("KubeProxyIPVSDegraded", corev1.ConditionFalse, "")
	e.tl.say("ipvs check ok with the IPv6 virtual servers in the table; KubeProxyIPVSDegraded=False")

	// arp_ignore/arp_announce are IPv4 settings and Linux never answers a
	// solicitation for an address on kube-ipvs0: with strict ARP off and only
	// an IPv6 LoadBalancer IP bound, arp-sysctls has nothing to judge.
	e.g.run(ctx, t, `for k in arp_ignore arp_announce; do echo 0 >/proc/sys/net/ipv4/conf/all/$k; done`)
	e.tl.say("set net.ipv4.conf.all.arp_ignore=0 and arp_announce=0 by hand (strict ARP off); kube-ipvs0 holds only the IPv6 LoadBalancer IP")
	e.waitNextRun("arp-sysctls")
	e.waitMetric("ipvs_guard_check_status", map[string]string{"check": "arp-sysctls", "status": "skipped"}, 1)
	if c := e.condition("StrictARPDisabled"); c.Status != corev1.ConditionFalse {
		t.Errorf("step 6: StrictARPDisabled=%s (%s) with only an IPv6 LoadBalancer IP on kube-ipvs0: %q", c.Status, c.Reason, c.Message)
	}
	e.tl.say("arp-sysctls skipped (no IPv4 LoadBalancer IP on kube-ipvs0); StrictARPDisabled stays False")
	e.g.run(ctx, t, `echo 1 >/proc/sys/net/ipv4/conf/all/arp_ignore && echo 2 >/proc/sys/net/ipv4/conf/all/arp_announce`)
}

// scenarioIPv6ServiceGone: the dual-stack Service is deleted → its IPv6 IP
// leaves /metrics and LoadBalancerARPFailing goes False.
func (e *e2e) scenarioIPv6ServiceGone() {
	t, ctx := e.t, e.ctx
	e.begin("7. The dual-stack LoadBalancer Service is deleted")
	if err := deleteService(ctx, e.cs, "default", "cart"); err != nil {
		t.Fatalf("step 7: %v", err)
	}
	e.tl.say("deleted default/cart")
	e.waitCondition("LoadBalancerARPFailing", corev1.ConditionFalse, "")
	e.waitEvents("LoadBalancerARPFailing", map[string]int{"Warning": 2, "Normal": 2})
	e.poll("the NDP series of "+silentLBIP6+" to vanish from /metrics", func() (bool, string) {
		mfs, err := scrape(ctx, e.metrics)
		if err != nil {
			return false, err.Error()
		}
		return !hasSeries(mfs, "ipvs_guard_arp_probe_result", "ip", silentLBIP6), "still there"
	})
	e.tl.say("LoadBalancerARPFailing=False; /metrics no longer has any series for %s", silentLBIP6)
}

// stopAgent checks the end state and stops the agent.
func (e *e2e) stopAgent() {
	t, ctx := e.t, e.ctx
	e.begin("The end")
	// Exactly one Event per transition over the whole run.
	e.waitEvents("IPVSModulesMissing", map[string]int{"Warning": 1, "Normal": 1})
	e.waitEvents("StrictARPDisabled", map[string]int{"Warning": 1, "Normal": 1})
	e.waitEvents("LoadBalancerARPFailing", map[string]int{"Warning": 2, "Normal": 2})
	e.tl.say("one Event per transition: IPVSModulesMissing and StrictARPDisabled each have exactly one Warning and one Normal Event, LoadBalancerARPFailing two of each (IPv4, then IPv6)")
	n, err := e.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.Reason == "KubeletReady" {
			ready = true
		}
	}
	if !ready {
		t.Errorf("kubelet's Ready condition was changed: %+v", n.Status.Conditions)
	} else {
		e.tl.say("kubelet's Ready condition on the Node is untouched")
	}
	e.stopAgentTimed("agent")
	e.tl.say("figures:")
	for _, f := range e.figures {
		e.tl.detail("%s", f)
	}
}

// startKubeProxy starts the real kube-proxy in IPVS mode under the guest's
// restart loop.
func (e *e2e) startKubeProxy(strictARP bool) {
	e.kpFlags = []string{
		"--kubeconfig=/run/e2e/kube-proxy.kubeconfig", "--proxy-mode=ipvs", "--ipvs-scheduler=lc",
		"--hostname-override=" + nodeName, "--metrics-bind-address=127.0.0.1:10249",
		"--ipvs-strict-arp=" + strconv.FormatBool(strictARP), "--cluster-cidr=" + clusterCIDRs, "--v=1",
		"--ipvs-sync-period=" + kpSyncPeriod.String(),
	}
	e.g.run(e.ctx, e.t, `kp_start `+strings.Join(e.kpFlags, " "))
	e.tl.say("kube-proxy v1.37.1 started: %s", strings.Join(e.kpFlags[1:7], " "))
}

// capBits are the capability numbers (linux/capability.h) the agent may hold.
var capBits = map[string]uint{"NET_ADMIN": 12, "NET_RAW": 13, "SYS_MODULE": 16}

// startAgent starts `ipvs-guard run` with the shipped DaemonSet's args (the
// chart's defaults), report-only unless remediate, holding only the
// DaemonSet's capabilities (a report-only chart drops SYS_MODULE) with
// no-new-privs, as in the pod.
func (e *e2e) startAgent(remediate bool) {
	var caps []string
	var want uint64
	for _, c := range e.agent.caps {
		if c == "SYS_MODULE" && !remediate {
			continue
		}
		bit, ok := capBits[c]
		if !ok {
			e.t.Fatalf("the DaemonSet adds capability %s, which the agent should not need", c)
		}
		caps = append(caps, c)
		want |= 1 << bit
	}
	bounding := "-all"
	for _, c := range caps {
		bounding += ",+" + strings.ToLower(c)
	}
	args := []string{}
	for _, a := range e.agent.args {
		switch {
		case a == "--remediate", strings.HasPrefix(a, "--resync-period="), strings.HasPrefix(a, "--kubeconfig="):
			continue
		case strings.HasPrefix(a, "--metrics-secure="):
			// This tier scrapes /metrics over plain HTTP through QEMU's port
			// forward; HTTPS scraping by a real Prometheus is the metallb tier's.
			a = "--metrics-secure=false"
		}
		// The kubelet expands $(HOST_IP) to the node's IP; QEMU's forward
		// reaches the guest's user-network address, so every interface.
		args = append(args, strings.ReplaceAll(a, "$(HOST_IP)", ""))
	}
	if len(args) == 0 || args[0] != "run" {
		e.t.Fatalf("the DaemonSet's args do not start with run: %q", e.agent.args)
	}
	// kube-proxy is a host process here (no RKE2 files, no ConfigMap):
	// the operator says its mode, as the node tier does.
	args = append(args, "--kubeconfig=/run/e2e/agent.kubeconfig", "--scheduler=lc", "--assume-proxy-mode=ipvs", "--resync-period="+resync)
	if remediate {
		args = append(args, "--remediate")
	}
	e.g.run(e.ctx, e.t, `NODE_NAME=`+nodeName+` bg_start agent /usr/libexec/e2e/setpriv --bounding-set `+bounding+
		` --inh-caps -all --no-new-privs -- /usr/local/bin/ipvs-guard `+strings.Join(args, " "))
	// Once setpriv has exec'd the agent, read what the agent holds.
	eff := strings.TrimSpace(e.waitGuest(30*time.Second, `p=$(cat /run/e2e/agent.pid)
[ "$(readlink /proc/$p/exe)" = /usr/local/bin/ipvs-guard ] && awk '/^CapEff:/ {print $2}' /proc/$p/status`))
	if got, err := strconv.ParseUint(eff, 16, 64); err != nil || got != want {
		e.t.Fatalf("agent's effective capabilities %s, want %016x (%v)", eff, want, caps)
	}
	mode := "report-only (remediation.enabled=false)"
	if remediate {
		mode = "with --remediate"
	}
	e.tl.say("ipvs-guard run started on the node, %s, with only the DaemonSet's capabilities %s (no-new-privs): %s",
		mode, strings.Join(caps, ","), strings.Join(args, " "))
}

var stoppedRE = regexp.MustCompile(`stopped agent rc=(\S+) after ([0-9.]+)s`)

// stopAgentTimed sends SIGTERM and expects exit code 0 within a few seconds.
// It records the agent's peak RSS (VmHWM) first.
func (e *e2e) stopAgentTimed(what string) {
	hwm := strings.TrimSpace(e.g.run(e.ctx, e.t, `vmhwm agent`))
	kib, err := strconv.Atoi(hwm)
	if err != nil {
		e.t.Errorf("reading the agent's VmHWM: %q", hwm)
	}
	e.figures = append(e.figures, fmt.Sprintf("%s: peak RSS in the guest (VmHWM) %.1f MiB", what, float64(kib)/1024))
	out := e.g.run(e.ctx, e.t, `bg_stop agent 10`)
	m := stoppedRE.FindStringSubmatch(out)
	if m == nil || m[1] != "0" {
		e.t.Errorf("%s did not exit 0 on SIGTERM: %s\n%s", what, out, e.guestLog("agent", 30))
		return
	}
	e.tl.say("%s stopped on SIGTERM: exit code 0 after %ss (peak RSS %.1f MiB)", what, m[2], float64(kib)/1024)
}

// waitCondition waits until the Node shows condType with status (and
// reason, if not empty) and returns it.
func (e *e2e) waitCondition(condType string, status corev1.ConditionStatus, reason string) corev1.NodeCondition {
	e.t.Helper()
	var found corev1.NodeCondition
	want := condType + "=" + string(status)
	if reason != "" {
		want += " (" + reason + ")"
	}
	e.poll("condition "+want, func() (bool, string) {
		n, err := e.cs.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if string(c.Type) == condType {
				found = c
				ok := c.Status == status && (reason == "" || c.Reason == reason)
				return ok, fmt.Sprintf("%s=%s (%s) %q", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		return false, "condition absent"
	})
	return found
}

// begin starts a scenario step: its heading in the timeline, and its name
// in the failure report.
func (e *e2e) begin(format string, args ...any) {
	e.step = fmt.Sprintf(format, args...)
	e.tl.heading("%s", e.step)
}

// condition returns the Node's condition of condType (zero when absent).
func (e *e2e) condition(condType string) corev1.NodeCondition {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if string(c.Type) == condType {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// waitNextRun waits until the agent has finished a run of check that
// started after this call (ipvs_guard_reconcile_total grew by two: the run
// in progress, if any, and a whole one after it).
func (e *e2e) waitNextRun(check string) {
	e.t.Helper()
	runs := func() (float64, string) {
		mfs, err := scrape(e.ctx, e.metrics)
		if err != nil {
			return -1, err.Error()
		}
		v, ok := sample(mfs, "ipvs_guard_reconcile_total", map[string]string{"check": check})
		if !ok {
			return -1, "no such series"
		}
		return v, fmt.Sprintf("%v runs", v)
	}
	var start float64
	e.poll("a first scrape of the "+check+" runs", func() (bool, string) {
		v, state := runs()
		start = v
		return v >= 0, state
	})
	e.poll(fmt.Sprintf("two more runs of %s (after %v)", check, start), func() (bool, string) {
		v, state := runs()
		return v >= start+2, state
	})
}

// waitEvents waits until ipvs-guard's Events for action (a condition type)
// on the node count exactly want per Event type, and fails if there are
// more: one Event per transition, never one per loop.
func (e *e2e) waitEvents(action string, want map[string]int) {
	e.t.Helper()
	e.poll(fmt.Sprintf("Events %v for %s", want, action), func() (bool, string) {
		list, err := e.cs.EventsV1().Events("").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]int{}
		for _, ev := range list.Items {
			if ev.ReportingController != "ipvs-guard" || ev.Action != action || ev.Regarding.Name != nodeName {
				continue
			}
			n := 1
			if ev.Series != nil {
				n = int(ev.Series.Count)
			}
			got[ev.Type] += n
		}
		for k, v := range got {
			if v > want[k] {
				e.t.Fatalf("%s: %d %s Events, want %d (one per transition)", action, v, k, want[k])
			}
		}
		for k, v := range want {
			if got[k] != v {
				return false, fmt.Sprintf("%v", got)
			}
		}
		return true, ""
	})
}

// waitMetric waits until the agent's /metrics has the series with value.
func (e *e2e) waitMetric(name string, labels map[string]string, value float64) {
	e.t.Helper()
	e.poll(fmt.Sprintf("%s%v = %v", name, labels, value), func() (bool, string) {
		mfs, err := scrape(e.ctx, e.metrics)
		if err != nil {
			return false, err.Error()
		}
		v, ok := sample(mfs, name, labels)
		if !ok {
			return false, "no such series"
		}
		return v == value, fmt.Sprintf("value %v", v)
	})
}

// waitGuest waits until script succeeds in the guest and returns its output.
func (e *e2e) waitGuest(timeout time.Duration, script string) string {
	e.t.Helper()
	var out string
	deadline := time.Now().Add(timeout)
	for {
		o, code, err := e.g.Exec(e.ctx, script)
		if err == nil && code == 0 {
			return o
		}
		out = o
		if time.Now().After(deadline) {
			e.t.Fatalf("guest: %s: not true after %s (last output %q, err %v)", firstLine(script), timeout, out, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// poll calls f every 250 ms until it reports done, failing after waitFor.
func (e *e2e) poll(what string, f func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, state := f()
		if ok {
			return
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("waiting for %s: gave up after %s; last seen: %s\nagent log:\n%s", what, waitFor, state, e.guestLog("agent", 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// guestLog returns the last lines of a guest process's log.
func (e *e2e) guestLog(name string, lines int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, err := e.g.Exec(ctx, fmt.Sprintf("tail -n %d /run/e2e/%s.log", lines, name))
	if err != nil {
		return err.Error()
	}
	return out
}

// finish tells the guest the verdict (it powers off) and keeps the guest's
// logs next to the console log when E2E_ARTIFACTS is set.
func (e *e2e) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if dir := os.Getenv("E2E_ARTIFACTS"); dir != "" {
		for _, name := range []string{"agent", "kube-proxy"} {
			if out, _, err := e.g.Exec(ctx, "cat /run/e2e/"+name+".log"); err == nil {
				_ = os.WriteFile(filepath.Join(dir, name+".log"), []byte(out), 0o644)
			}
		}
	}
	if e.t.Failed() {
		e.t.Logf("FAILED in step %q", e.step)
	}
	if e.t.Failed() && len(e.figures) > 0 {
		e.t.Logf("figures so far: %s", strings.Join(e.figures, "; "))
	}
	verdict := 0
	if e.t.Failed() {
		verdict = 1
	}
	if _, _, err := e.g.Exec(ctx, fmt.Sprintf("echo %d >/run/e2e/done", verdict)); err != nil {
		e.t.Logf("telling the guest to stop: %v", err)
	}
}

// klogMessage drops klog's "E1122 01:13:39.039128     193 file.go:96] " prefix.
func klogMessage(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if i := strings.Index(l, "] "); i > 0 && i < 60 {
			l = l[i+2:]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

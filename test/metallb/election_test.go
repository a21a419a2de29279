// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipvs-guard/ipvs-guard/internal/metallbtest"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
)

// Labels the preference scenario puts on nodes.
const (
	preferLabel = "ipvs-guard.test/prefer"
	zoneLabel   = "ipvs-guard.test/zone"
)

// TestMetalLBElection checks the rules MetalLB v0.16.2's layer-2 election
// added, against its real controller and speakers: an L2Advertisement's
// serviceSelectors that leave the Service out (the cause named), weighted
// preferredNodeSelectors of two advertisements (the announcer moves when the
// preferred node's label goes, as arping and ServiceL2Status show; the
// advisory when the preference does not hold, and its alert), and a
// LoadBalancer IP equal to the InternalIP of a node no agent runs on.
func TestMetalLBElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, []string{"a", "b", "c", "d"}, []string{"a", "b", "c"})
	c.startAlerting(alertFor)

	ip := c.service("web", corev1.ServiceExternalTrafficPolicyCluster, "a")
	c.expectAnswered(t, ip, c.waitStableAnnouncer("web"))

	t.Run("serviceSelectors of the only L2Advertisement exclude the Service", func(t *testing.T) {
		sel := map[string]any{"serviceSelectors": []any{map[string]any{"matchLabels": map[string]any{"app": "db"}}}}
		c.cause(t, ip, clusterview.CauseServiceSelectors,
			[]string{"no L2Advertisement selects this Service", "L2Advertisement metallb-system/l2 (serviceSelectors: app=db)", "Service default/web's labels (none)"},
			func() {
				if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", sel); err != nil {
					t.Fatal(err)
				}
			},
			func() {
				if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", nil); err != nil {
					t.Fatal(err)
				}
			})
	})
	t.Run("preferredNodeSelectors of two advertisements: the preferred node's label removed, then its speaker out of the memberlist", func(t *testing.T) {
		c.preferredNodes(t, ip)
	})
	t.Run("LoadBalancer IP equal to the InternalIP of a node without an agent", func(t *testing.T) {
		c.nodeAddressConflict(t)
	})
	c.printFigures()
}

// preferredNodes gives two advertisements weighted preferences (50 for
// preferLabel on p, 10 for zoneLabel on q), expects MetalLB to move the IP
// to p, removes p's label (the IP moves to q: ServiceL2Status, arping and
// the agents agree, and no advisory), then stops p's speaker, leaves its
// Pod Ready and labels p again: MetalLB keeps q, the probers report the
// advisory (both nodes, both weights) and the info alert fires. Restarting
// p's speaker moves the IP back and clears it.
func (c *cluster) preferredNodes(t *testing.T, ip netip.Addr) {
	before := c.l2Status("web")
	speakers := []string{"a", "b", "c"}
	var p, q string
	for _, n := range speakers {
		switch {
		case n == before:
		case p == "":
			p = n
		case q == "":
			q = n
		}
	}
	prefer := func(w int, key, val string) map[string]any {
		return map[string]any{"weight": int64(w), "preference": map[string]any{"matchLabels": map[string]any{key: val}}}
	}
	c.forNodes([]string{p}, func(n *corev1.Node) { n.Labels[preferLabel] = "yes" }, false)
	c.forNodes([]string{q}, func(n *corev1.Node) { n.Labels[zoneLabel] = "b" }, false)
	if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", map[string]any{"preferredNodeSelectors": []any{prefer(50, preferLabel, "yes")}}); err != nil {
		t.Fatal(err)
	}
	if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2-zone", map[string]any{"preferredNodeSelectors": []any{prefer(10, zoneLabel, "b")}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := metallbtest.DeleteL2Advertisement(c.ctx, c.dyn, "l2-zone"); err != nil {
			t.Error(err)
		}
		if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", nil); err != nil {
			t.Error(err)
		}
		c.forNodes([]string{p, q}, func(n *corev1.Node) { delete(n.Labels, preferLabel); delete(n.Labels, zoneLabel) }, false)
	}()
	c.waitFor("MetalLB moves web to the preferred node "+p, waitLong, func() (bool, string) {
		n := c.l2Status("web")
		return n == p, "ServiceL2Status names " + n
	})
	c.expectAnswered(t, ip, p)
	c.expectNoAdvisory(t, ip, p)
	t.Logf("weights %s=50 (L2Advertisement l2), %s=10 (l2-zone): MetalLB moved %s from %s to %s", p, q, ip, before, p)

	// The preferred node's label removed: q (10) outweighs the rest (0).
	// The probers follow the announcer (it never probes its own IP).
	movers := append(c.shardProbers(ip, p), c.shardProbers(ip, q)...)
	w := c.watchNodeWrites()
	fault := time.Now()
	c.forNodes([]string{p}, func(n *corev1.Node) { delete(n.Labels, preferLabel) }, false)
	c.waitFor("MetalLB moves web to "+q, waitLong, func() (bool, string) {
		n := c.l2Status("web")
		return n == q, "ServiceL2Status names " + n
	})
	moved := time.Since(fault)
	c.expectAnswered(t, ip, q)
	answered := time.Since(fault)
	c.expectNoAdvisory(t, ip, q)
	time.Sleep(3 * time.Second)
	writes := w.stop()
	c.figure("preferred node's label removed → ServiceL2Status moves / its probers and arping see the new announcer", "%.1fs / %.1fs", moved.Seconds(), answered.Seconds())
	c.figure("preferred node's label removed: agent Node writes, cluster-wide", "%s (probers before %v, after %v)", writes, c.shardProbers(ip, p), c.shardProbers(ip, q))
	// Only a node that starts or stops probing the IP writes (its
	// condition's reason changes between ARPAnswered and NoTargets).
	writes.mu.Lock()
	for n := range writes.byNode {
		if !slices.Contains(movers, n) {
			t.Errorf("node %s, which neither probed %s before nor after the move, wrote its Node", n, ip)
		}
	}
	writes.mu.Unlock()

	// p's speaker gone from the memberlist, its Pod still Ready (no
	// kubelet here to notice), and p labelled again: MetalLB keeps q.
	c.mlb.Speakers[p].Stop(5 * time.Second)
	time.Sleep(3 * time.Second)
	w = c.watchNodeWrites()
	fault = time.Now()
	c.forNodes([]string{p}, func(n *corev1.Node) { n.Labels[preferLabel] = "yes" }, false)
	probers := c.shardProbers(ip, q)
	c.waitFor(fmt.Sprintf("the advisory on %v: %s announced by %s, %s preferred", probers, ip, q, p), waitLong, func() (bool, string) {
		if n := c.l2Status("web"); n != q {
			return false, "ServiceL2Status names " + n
		}
		for _, n := range probers {
			if v, ok := c.metric(n, "ipvs_guard_arp_announcer_not_preferred", map[string]string{"ip": ip.String(), "service": "default/web", "announcer": q, "preferred": p}); !ok || v != 1 {
				return false, "node " + n + ": no ipvs_guard_arp_announcer_not_preferred"
			}
		}
		return true, ""
	})
	advisory := time.Since(fault)
	c.figure("preferred node labelled, its speaker out of the memberlist → advisory on the probers", "%.1fs", advisory.Seconds())
	firing, notified := c.expectAlert("IPVSGuardLoadBalancerIPAnnouncerNotPreferred", map[string]string{"ip": ip.String(), "announcer": q, "preferred": p, "severity": "info"}, fault)
	c.figure("advisory → info alert firing in Prometheus / notified (for: 5s)", "%.1fs / %.1fs", firing.Seconds(), notified.Seconds())
	for _, n := range probers {
		out := c.diagnoseARP(t, n)
		for _, s := range []string{"announced by node " + q + " (preference weight 10)", "prefer node " + p + " (weight 50)", "metallb-system/l2, metallb-system/l2-zone"} {
			if !strings.Contains(out, s) {
				t.Errorf("node %s: the arp check's findings do not say %q:\n%s", n, s, out)
			}
		}
		if cond := c.condition(n, "LoadBalancerARPFailing"); cond.Status != corev1.ConditionFalse {
			t.Errorf("node %s: LoadBalancerARPFailing=%s %s with only the advisory, want False", n, cond.Status, cond.Message)
		}
	}
	c.expectArping(t, ip, probers, func(string) []string { return c.macs(q) })
	time.Sleep(3 * time.Second)
	writes = w.stop()
	c.figure("advisory: agent Node writes, cluster-wide", "%s", writes)
	if n := writes.total(); n != 0 {
		t.Errorf("%d agent Node writes for an advisory, want 0", n)
	}

	if err := c.mlb.StartSpeaker(c.ctx, c.nodes[p]); err != nil {
		t.Fatal(err)
	}
	c.waitFor("MetalLB moves web back to "+p, waitLong, func() (bool, string) {
		n := c.l2Status("web")
		return n == p, "ServiceL2Status names " + n
	})
	c.expectAnswered(t, ip, p)
	c.expectNoAdvisory(t, ip, p)
}

// expectNoAdvisory waits until no prober of ip reports the advisory.
func (c *cluster) expectNoAdvisory(t *testing.T, ip netip.Addr, announcer string) {
	t.Helper()
	probers := c.shardProbers(ip, announcer)
	c.waitFor(fmt.Sprintf("no advisory for %s on %v", ip, probers), waitLong, func() (bool, string) {
		for _, n := range probers {
			if _, ok := c.metric(n, "ipvs_guard_arp_announcer_not_preferred", map[string]string{"ip": ip.String()}); ok {
				return false, "node " + n + " reports ipvs_guard_arp_announcer_not_preferred"
			}
		}
		return true, ""
	})
}

// diagnoseARP runs `ipvs-guard diagnose -o json` in node's namespace and
// returns its output.
func (c *cluster) diagnoseARP(t *testing.T, node string) string {
	t.Helper()
	out, err := c.nodes[node].Command(c.ctx, c.bin, "diagnose", "--kubeconfig="+c.mlb.NodeKubeconfig, "--node-name="+node,
		"--root="+c.trees[node], "--scheduler=rr", "-o", "json").Output()
	if len(out) == 0 {
		t.Fatalf("node %s: diagnose: %v", node, err)
	}
	return string(out)
}

// nodeAddressConflict adds node "cp" to the segment and the cluster, with
// no agent and no speaker (a control-plane node the DaemonSets do not
// tolerate), gives a Service its InternalIP from a one-address pool, and
// expects exactly the IP's probers to name the conflict (kind
// node-address): cp's kernel answers for its own address besides the
// speaker MetalLB elects, as arping shows.
func (c *cluster) nodeAddressConflict(t *testing.T) {
	cp, err := c.seg.AddNode(c.ctx, "cp")
	if err != nil {
		t.Fatal(err)
	}
	c.nodes["cp"] = cp
	c.createNode("cp", cp.IP)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "cp-pool", "namespace": metallbtest.Namespace},
		"spec":     map[string]any{"addresses": []any{cp.IP.String() + "/32"}},
	}}
	if _, err := c.dyn.Resource(metallbtest.IPAddressPoolGVR).Namespace(metallbtest.Namespace).Create(c.ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2-cp", map[string]any{"ipAddressPools": []any{"cp-pool"}}); err != nil {
		t.Fatal(err)
	}
	w := c.watchNodeWrites()
	fault := time.Now()
	ip := c.serviceFromPool("cpsvc", "cp-pool", "a")
	if ip != cp.IP {
		t.Fatalf("MetalLB assigned %s, want cp's InternalIP %s", ip, cp.IP)
	}
	announcer, seen := c.waitStableAnnouncerSeen("cpsvc")
	probers := c.waitProbers(ip, announcer)
	d := c.expectFailing(probers, clusterview.ReasonLBIPConflict, func(string) []string {
		return []string{ip.String() + " is the LoadBalancer IP of Service default/cpsvc and the InternalIP of node cp"}
	}, fault)
	c.figure("LoadBalancer IP = InternalIP of a node without an agent → LoadBalancerIPConflict on the probers", "%.1fs", d.Seconds())
	for _, p := range probers {
		if v, ok := c.metric(p, "ipvs_guard_lb_ip_conflict", map[string]string{"ip": ip.String(), "kind": "node-address", "owner": "default/cpsvc", "other": "cp/InternalIP"}); !ok || v != 1 {
			t.Errorf("node %s: no ipvs_guard_lb_ip_conflict{kind=node-address,other=cp/InternalIP} for %s", p, ip)
		}
	}
	c.expectArping(t, ip, probers, func(string) []string { return c.macs(announcer, "cp") })
	time.Sleep(3 * time.Second)
	writes := w.stop()
	c.figure("LoadBalancer IP = a node's InternalIP: agent Node writes, cluster-wide", "%s (probers %v)", writes, probers)
	// Until ServiceL2Status names the announcer the IP is sharded without
	// one (and while MetalLB settles, by each announcer it names), and cp's
	// own kernel answers at once: those nodes are the IP's probers for that
	// while, and may name the conflict before handing it on.
	var mayAlso []string
	for _, a := range seen {
		mayAlso = append(mayAlso, c.shardProbers(ip, a)...)
	}
	c.expectWriters(t, writes, probers, mayAlso...)

	c.deleteService("cpsvc", ip)
	if err := metallbtest.DeleteL2Advertisement(c.ctx, c.dyn, "l2-cp"); err != nil {
		t.Error(err)
	}
	if err := c.dyn.Resource(metallbtest.IPAddressPoolGVR).Namespace(metallbtest.Namespace).Delete(c.ctx, "cp-pool", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	c.waitFor("the conflict clears on "+strings.Join(probers, ", "), waitLong, func() (bool, string) {
		for _, p := range probers {
			if cond := c.condition(p, "LoadBalancerARPFailing"); cond.Status != corev1.ConditionFalse {
				return false, fmt.Sprintf("node %s: %s %s", p, cond.Status, cond.Reason)
			}
		}
		return true, ""
	})
}

// serviceFromPool is service, with the Service asking MetalLB for an
// address of pool (metallb.io/address-pool).
func (c *cluster) serviceFromPool(name, pool, endpointNode string) netip.Addr {
	c.t.Helper()
	_, err := c.kube.CoreV1().Services("default").Create(c.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"metallb.io/address-pool": pool}},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	ready := true
	port, proto, pname := int32(8080), corev1.ProtocolTCP, "http"
	_, err = c.kube.DiscoveryV1().EndpointSlices("default").Create(c.ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.244.9.11"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &endpointNode,
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	var ip netip.Addr
	c.waitFor("MetalLB's controller assigns "+name+" an IP of "+pool, time.Minute, func() (bool, string) {
		s, err := c.kube.CoreV1().Services("default").Get(c.ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, fmt.Sprint(err)
		}
		ip, err = netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		return err == nil, fmt.Sprint(err)
	})
	for _, n := range c.order {
		if slices.Contains([]string{guestName}, n) && c.guest != nil {
			continue
		}
		if err := c.nodes[n].AddVIP(c.ctx, ip); err != nil {
			c.t.Fatal(err)
		}
	}
	return ip
}

// total is the number of agent Node writes.
func (n *nodeWrites) total() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := 0
	for _, v := range n.byNode {
		t += v
	}
	return t
}

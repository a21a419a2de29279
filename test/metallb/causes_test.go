// SPDX-License-Identifier: Apache-2.0

//go:build metallb

package metallb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/ipvs-guard/ipvs-guard/internal/metallbtest"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
)

// TestMetalLBCauses makes each cause of an unanswered LoadBalancer IP and
// each conflict for real, with MetalLB v0.16.2's controller and speakers:
// the agents that probe the IP name the cause (condition message, metric)
// while arping sees no reply at the same moment, and only they write their
// Node. Then the conflicts: the IP on a node's NIC, and two Services given
// the same IP while MetalLB's controller is down.
func TestMetalLBCauses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, []string{"a", "b", "c", "d"}, []string{"a", "b", "c"})
	speakers := []string{"a", "b", "c"}

	ip := c.service("web", corev1.ServiceExternalTrafficPolicyCluster, "a")
	announcer := c.waitAnnouncer("web", "")
	c.expectAnswered(t, ip, announcer)

	t.Run("exclusion label on the announcing node, the only one its L2Advertisement selects", func(t *testing.T) {
		only := c.l2Status("web")
		sel := map[string]any{"nodeSelectors": []any{map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": only}}}}
		if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", sel); err != nil {
			t.Fatal(err)
		}
		c.expectAnswered(t, ip, c.waitStableAnnouncer("web"))
		c.cause(t, ip, clusterview.CauseExcludedByLabel, []string{"L2Advertisement metallb-system/l2 selects, " + only + " labelled node.kubernetes.io/exclude-from-external-load-balancers"},
			func() {
				c.forNodes([]string{only}, func(n *corev1.Node) { n.Labels[clusterview.ExcludeFromLoadBalancersLabel] = "" }, false)
			},
			func() {
				c.forNodes([]string{only}, func(n *corev1.Node) { delete(n.Labels, clusterview.ExcludeFromLoadBalancersLabel) }, false)
				if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", nil); err != nil {
					t.Fatal(err)
				}
			})
	})
	t.Run("exclusion label on the speaker nodes", func(t *testing.T) {
		c.cause(t, ip, clusterview.CauseExcludedByLabel, []string{"labelled node.kubernetes.io/exclude-from-external-load-balancers"},
			func() {
				c.forNodes(speakers, func(n *corev1.Node) { n.Labels[clusterview.ExcludeFromLoadBalancersLabel] = "" }, false)
			},
			func() {
				c.forNodes(speakers, func(n *corev1.Node) { delete(n.Labels, clusterview.ExcludeFromLoadBalancersLabel) }, false)
			})
	})
	t.Run("NetworkUnavailable=True on the speaker nodes", func(t *testing.T) {
		c.cause(t, ip, clusterview.CauseNetworkUnavailable, []string{"a, b, c with NetworkUnavailable=True"},
			func() {
				c.forNodes(speakers, func(n *corev1.Node) { setNetworkUnavailable(n, corev1.ConditionTrue) }, true)
			},
			func() {
				c.forNodes(speakers, func(n *corev1.Node) { setNetworkUnavailable(n, corev1.ConditionFalse) }, true)
			})
	})
	t.Run("speaker Pods gone from every node (DaemonSet nodeSelector)", func(t *testing.T) {
		c.cause(t, ip, clusterview.CauseNoReadySpeaker, []string{"a, b, c, d without a ready speaker Pod"},
			func() {
				for _, n := range speakers {
					c.mlb.Speakers[n].Stop(5 * time.Second)
					if err := c.kube.CoreV1().Pods(metallbtest.Namespace).Delete(c.ctx, "speaker-"+n, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			},
			func() {
				for _, n := range speakers {
					if err := c.mlb.StartSpeaker(c.ctx, c.nodes[n]); err != nil {
						t.Fatal(err)
					}
				}
			})
	})
	t.Run("IPAddressPool with no L2Advertisement", func(t *testing.T) {
		c.cause(t, ip, clusterview.CauseNoL2Advertisement, []string{"IPAddressPool metallb-system/pool is selected by no L2Advertisement"},
			func() {
				if err := metallbtest.DeleteL2Advertisement(c.ctx, c.dyn, "l2"); err != nil {
					t.Fatal(err)
				}
			},
			func() {
				if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", nil); err != nil {
					t.Fatal(err)
				}
			})
	})
	t.Run("the IP on another node's NIC", func(t *testing.T) {
		c.nicConflict(t, ip)
	})
	t.Run("two Services with the same IP", func(t *testing.T) {
		c.serviceConflict(t, ip)
	})
	c.printFigures()
}

// cause makes a fault, waits until every agent that probes ip once
// MetalLB withdrew it says LoadBalancerARPFailing=True ARPNoReply with the
// cause in its message and its metric, checks arping sees no reply at the
// same moment and counts the Node writes it cost, then fixes it.
func (c *cluster) cause(t *testing.T, ip netip.Addr, cause string, says []string, fault, fix func()) {
	t.Helper()
	w := c.watchNodeWrites()
	start := time.Now()
	fault()
	// A speaker that stops announcing deletes its ServiceL2Status; one
	// that is killed leaves it (its Pod's garbage collection would delete
	// it; no kube-controller-manager runs here): the agents then name the
	// announcer MetalLB may no longer use.
	stale := ""
	deadline := time.Now().Add(20 * time.Second)
	for {
		stale = c.l2Status("web")
		if stale == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if stale != "" {
		t.Logf("ServiceL2Status still names %s 20s after the fault", stale)
		cause, says = clusterview.CauseAnnouncerIneligible, []string{"ServiceL2Status names node " + stale + " as its announcer, which may not announce"}
	}
	probers := c.waitProbers(ip, stale)
	d := c.expectFailing(probers, "ARPNoReply", func(string) []string { return append([]string{ip.String(), "no MAC answered"}, says...) }, start)
	c.expectArping(t, ip, probers, func(string) []string { return nil })
	for _, p := range probers {
		if v, ok := c.metric(p, "ipvs_guard_arp_no_reply_cause", map[string]string{"ip": ip.String(), "cause": cause, "service": "default/web"}); !ok || v != 1 {
			t.Errorf("node %s: no ipvs_guard_arp_no_reply_cause{cause=%q} for %s", p, cause, ip)
		}
	}
	time.Sleep(3 * time.Second) // writes that would follow the verdict
	writes := w.stop()
	c.figure(cause+": fault → condition naming it", "%.1fs", d.Seconds())
	c.figure(cause+": agent Node writes, cluster-wide", "%s (probers %v)", writes, probers)
	c.expectWriters(t, writes, probers)
	fix()
	back := c.waitStableAnnouncer("web")
	c.expectAnswered(t, ip, back)
}

// nicConflict puts ip on the NIC of a node that neither announces nor
// probes it (kube-vip would): that node's agent names the conflict
// (LoadBalancerIPConflict, interface) and the probers see two MACs, as arping does.
func (c *cluster) nicConflict(t *testing.T, ip netip.Addr) {
	announcer := c.l2Status("web")
	probers := c.shardProbers(ip, announcer)
	var holder string
	for _, n := range c.order {
		if n != announcer && !slices.Contains(probers, n) {
			holder = n
		}
	}
	if holder == "" {
		t.Fatalf("no node besides announcer %s and probers %v", announcer, probers)
	}
	w := c.watchNodeWrites()
	fault := time.Now()
	if err := c.nodes[holder].AddAddress(c.ctx, ip); err != nil {
		t.Fatal(err)
	}
	d := c.expectFailing([]string{holder}, clusterview.ReasonLBIPConflict, func(string) []string {
		return []string{ip.String() + " is the LoadBalancer IP of Service default/web and sits on interface eth0 of node " + holder}
	}, fault)
	c.figure("IP on a node's NIC → LoadBalancerIPConflict on that node", "%.1fs", d.Seconds())
	if v, ok := c.metric(holder, "ipvs_guard_lb_ip_conflict", map[string]string{"ip": ip.String(), "kind": "interface", "owner": "default/web", "other": holder + "/eth0"}); !ok || v != 1 {
		t.Errorf("node %s: no ipvs_guard_lb_ip_conflict{kind=interface} for %s", holder, ip)
	}
	named := func(string) []string {
		return []string{c.mac(announcer) + " (" + announcer + ")", c.mac(holder) + " (" + holder + ")"}
	}
	d = c.expectFailing(probers, "ARPConflict", named, fault)
	c.figure("IP on a node's NIC → ARPConflict on its probers", "%.1fs", d.Seconds())
	c.expectArping(t, ip, probers, func(string) []string { return c.macs(announcer, holder) })
	time.Sleep(3 * time.Second)
	writes := w.stop()
	c.figure("IP on a node's NIC: agent Node writes, cluster-wide", "%s (holder %s, probers %v)", writes, holder, probers)
	if err := c.nodes[holder].DelAddress(c.ctx, ip); err != nil {
		t.Fatal(err)
	}
	c.expectAnswered(t, ip, announcer)
}

// serviceConflict stops MetalLB's controller (as during a restart), gives a
// second Service without a sharing key the same IP, and expects exactly the
// IP's probers to name both Services; arping still sees the one announcer.
func (c *cluster) serviceConflict(t *testing.T, ip netip.Addr) {
	announcer := c.l2Status("web")
	probers := c.shardProbers(ip, announcer)
	c.mlb.Controller.Stop(5 * time.Second)
	w := c.watchNodeWrites()
	fault := time.Now()
	dup, err := c.kube.CoreV1().Services("default").Create(c.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dup"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dup.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	if _, err := c.kube.CoreV1().Services("default").UpdateStatus(c.ctx, dup, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := c.expectFailing(probers, clusterview.ReasonLBIPConflict, func(string) []string {
		return []string{ip.String() + " is the LoadBalancer IP of both Service default/dup and Service default/web", "neither carries the metallb.io/allow-shared-ip annotation"}
	}, fault)
	c.figure("two Services, one IP → LoadBalancerIPConflict on the probers", "%.1fs", d.Seconds())
	for _, p := range probers {
		if v, ok := c.metric(p, "ipvs_guard_lb_ip_conflict", map[string]string{"ip": ip.String(), "kind": "service", "owner": "default/dup", "other": "default/web"}); !ok || v != 1 {
			t.Errorf("node %s: no ipvs_guard_lb_ip_conflict{kind=service} for %s", p, ip)
		}
	}
	c.expectArping(t, ip, probers, func(string) []string { return c.macs(announcer) })
	time.Sleep(3 * time.Second)
	writes := w.stop()
	c.figure("two Services, one IP: agent Node writes, cluster-wide", "%s (probers %v)", writes, probers)
	// dup has no ServiceL2Status: its entry of the IP is sharded without
	// an announcer, so its probers are the IP's too.
	c.expectWriters(t, writes, append(slices.Clone(probers), c.shardProbers(ip, "")...))
	if err := c.kube.CoreV1().Services("default").Delete(c.ctx, "dup", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.mlb.StartController(c.ctx, freePort(t)); err != nil {
		t.Fatal(err)
	}
	c.expectAnswered(t, ip, announcer)
}

// expectWriters checks that each of probers wrote its Node and that the
// writers are at most one more than the probers: a fault made node by node
// (labels, conditions) moves the IP through announcers whose probers probe
// it for a moment, which is MetalLB's doing; no node writes for a verdict
// about an IP it does not probe. mayAlso are nodes that probed the IP for a
// while before (they may write, and need not).
func (c *cluster) expectWriters(t *testing.T, w *nodeWrites, probers []string, mayAlso ...string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range probers {
		if w.byNode[p] == 0 {
			t.Errorf("prober %s did not write its Node", p)
		}
	}
	var others []string
	for n := range w.byNode {
		if !slices.Contains(probers, n) && !slices.Contains(mayAlso, n) {
			others = append(others, n)
		}
	}
	if len(others) > 1 {
		var what []string
		for _, n := range others {
			what = append(what, fmt.Sprintf("%s: %s", n, strings.Join(w.what[n], "; ")))
		}
		t.Errorf("nodes %v, no probers of the IP (%v), wrote their Node:\n%s", others, probers, strings.Join(what, "\n"))
	}
}

// forNodes changes each of nodes (its status with status) and writes it back.
func (c *cluster) forNodes(nodes []string, change func(*corev1.Node), status bool) {
	c.t.Helper()
	for _, name := range nodes {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := c.kube.CoreV1().Nodes().Get(c.ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			change(n)
			if status {
				_, err = c.kube.CoreV1().Nodes().UpdateStatus(c.ctx, n, metav1.UpdateOptions{})
			} else {
				_, err = c.kube.CoreV1().Nodes().Update(c.ctx, n, metav1.UpdateOptions{})
			}
			return err
		})
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

func setNetworkUnavailable(n *corev1.Node, s corev1.ConditionStatus) {
	now := metav1.Now()
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeNetworkUnavailable {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].LastTransitionTime = s, now
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: s, Reason: "Test", LastTransitionTime: now})
}

// nodeWrites counts the writes of ipvs-guard's agents to Nodes: watch
// events whose change is in the agent's conditions or annotation (there is
// no kubelet on the segment; the test's own writes touch other fields).
type nodeWrites struct {
	mu     sync.Mutex
	byNode map[string]int
	// what says what each node's writes changed, for a failure's message.
	what map[string][]string
	w    watch.Interface
	done chan struct{}
}

func (n *nodeWrites) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	total := 0
	var parts []string
	for _, k := range slices.Sorted(mapKeys(n.byNode)) {
		total += n.byNode[k]
		parts = append(parts, fmt.Sprintf("%s:%d", k, n.byNode[k]))
	}
	return fmt.Sprintf("%d [%s]", total, strings.Join(parts, " "))
}

func mapKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (c *cluster) watchNodeWrites() *nodeWrites {
	c.t.Helper()
	// The state before, then every change from there on.
	list, err := c.kube.CoreV1().Nodes().List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	last := map[string]string{}
	lastNode := map[string]*corev1.Node{}
	for i := range list.Items {
		last[list.Items[i].Name] = agentState(&list.Items[i])
		lastNode[list.Items[i].Name] = &list.Items[i]
	}
	w, err := c.kube.CoreV1().Nodes().Watch(c.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		c.t.Fatal(err)
	}
	nw := &nodeWrites{byNode: map[string]int{}, what: map[string][]string{}, w: w, done: make(chan struct{})}
	go func() {
		defer close(nw.done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			key := agentState(n)
			prev, seen := last[n.Name]
			before := lastNode[n.Name]
			last[n.Name], lastNode[n.Name] = key, n
			if ev.Type == watch.Modified && seen && prev != key {
				nw.mu.Lock()
				nw.byNode[n.Name]++
				nw.what[n.Name] = append(nw.what[n.Name], agentChange(before, n))
				nw.mu.Unlock()
			}
		}
	}()
	return nw
}

// agentChange says what of the agent's state changed from a to b.
func agentChange(a, b *corev1.Node) string {
	var out []string
	for _, cb := range b.Status.Conditions {
		var ca corev1.NodeCondition
		for _, c := range a.Status.Conditions {
			if c.Type == cb.Type {
				ca = c
			}
		}
		if ca.Status != cb.Status || ca.Reason != cb.Reason || ca.Message != cb.Message {
			switch cb.Type {
			case "IPVSModulesMissing", "KubeProxyIPVSDegraded", "KubeProxyDataplaneDegraded", "StrictARPDisabled", "LoadBalancerARPFailing":
				out = append(out, fmt.Sprintf("%s %s/%s→%s/%s %q", cb.Type, ca.Status, ca.Reason, cb.Status, cb.Reason, cb.Message))
			}
		}
	}
	if a.Annotations["ipvs-guard.io/macs"] != b.Annotations["ipvs-guard.io/macs"] {
		out = append(out, "the MACs annotation")
	}
	return strings.Join(out, ", ")
}

// agentState is what ipvs-guard's agent writes on its Node: its four
// conditions and its MACs annotation.
func agentState(n *corev1.Node) string {
	var own []corev1.NodeCondition
	for _, cd := range n.Status.Conditions {
		switch cd.Type {
		case "IPVSModulesMissing", "KubeProxyIPVSDegraded", "KubeProxyDataplaneDegraded", "StrictARPDisabled", "LoadBalancerARPFailing":
			own = append(own, cd)
		}
	}
	b, _ := json.Marshal(struct {
		C []corev1.NodeCondition
		A string
	}{own, n.Annotations["ipvs-guard.io/macs"]})
	return string(b)
}

func (n *nodeWrites) stop() *nodeWrites {
	n.w.Stop()
	<-n.done
	return n
}

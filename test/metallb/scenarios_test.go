// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/internal/metallbtest"
)

// figure is one measured number for the closing table.
type figure struct{ name, value string }

func (c *cluster) figure(name, format string, args ...any) {
	c.figs = append(c.figs, figure{name, fmt.Sprintf(format, args...)})
	c.t.Logf("FIGURE %s: %s", name, fmt.Sprintf(format, args...))
}

func (c *cluster) printFigures() {
	var b strings.Builder
	fmt.Fprintf(&b, "figures (rules' for: rewritten to %s, scrape and evaluation every 1s, agents resync every %s):\n", alertFor, resync)
	for _, f := range c.figs {
		fmt.Fprintf(&b, "  %-58s %s\n", f.name, f.value)
	}
	c.t.Log(b.String())
}

// waitAnnouncer waits until MetalLB's ServiceL2Status for svc names a node
// other than not, and returns it.
func (c *cluster) waitAnnouncer(svc, not string) string {
	c.t.Helper()
	var node string
	c.waitFor("a speaker writes "+svc+"'s ServiceL2Status naming a node other than "+fmt.Sprintf("%q", not), waitLong, func() (bool, string) {
		node = c.l2Status(svc)
		return node != "" && node != not, fmt.Sprintf("ServiceL2Status names %q", node)
	})
	return node
}

// otherNodes returns every node but except.
func (c *cluster) otherNodes(except string) []string {
	var out []string
	for _, n := range c.order {
		if n != except {
			out = append(out, n)
		}
	}
	return out
}

// macs returns the nodes' eth0 MACs, sorted.
func (c *cluster) macs(nodes ...string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, c.mac(n))
	}
	slices.Sort(out)
	return out
}

// expectFailing waits until LoadBalancerARPFailing is True with reason on
// every prober, its message containing every want string for that prober,
// and returns how long that took from fault.
func (c *cluster) expectFailing(probers []string, reason string, want func(prober string) []string, fault time.Time) time.Duration {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("LoadBalancerARPFailing=True (%s) on %v", reason, probers), waitLong, func() (bool, string) {
		for _, p := range probers {
			cond := c.condition(p, "LoadBalancerARPFailing")
			if cond.Status != corev1.ConditionTrue || cond.Reason != reason {
				return false, fmt.Sprintf("node %s: %s %s: %s", p, cond.Status, cond.Reason, cond.Message)
			}
			for _, w := range want(p) {
				if !strings.Contains(cond.Message, w) {
					return false, fmt.Sprintf("node %s: message %q lacks %q", p, cond.Message, w)
				}
			}
		}
		return true, ""
	})
	d := time.Since(fault)
	for _, p := range probers {
		c.t.Logf("node %s: LoadBalancerARPFailing=True %s: %s", p, reason, c.condition(p, "LoadBalancerARPFailing").Message)
	}
	return d
}

// expectArping checks that iputils arping from each prober sees exactly want(prober).
func (c *cluster) expectArping(t *testing.T, ip netip.Addr, probers []string, want func(prober string) []string) {
	t.Helper()
	for _, p := range probers {
		r, err := c.arping(p, ip, 100, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want(p), r.MACs); diff != "" {
			t.Errorf("arping from %s (-want +seen):\n%s\n%s", p, diff, r.Output)
		}
	}
}

// strictARPOff turns kube-proxy's strictARP off on every node (arp_ignore=0,
// arp_announce=0): every node's kernel answers for the IP on its
// kube-ipvs0, besides the speaker that announces it.
func (c *cluster) strictARPOff(t *testing.T, ip netip.Addr, announcer string) {
	probers := c.shardProbers(ip, announcer)
	// The guest first: its kube-proxy restart and sync take a while, and
	// its sysctls flip last, just before the namespace nodes', from which
	// the fault is timed (an alert cannot fire in that second).
	if c.guest != nil {
		if err := c.setStrictARP(guestName, false); err != nil {
			t.Fatal(err)
		}
	}
	fault := time.Now()
	for _, n := range c.order {
		if n == guestName {
			continue
		}
		if err := c.setStrictARP(n, false); err != nil {
			t.Fatal(err)
		}
	}
	// A prober never hears itself: it sees every other node's MAC.
	want := func(p string) []string { return c.macs(c.otherNodes(p)...) }
	named := func(p string) []string {
		var out []string
		for _, n := range c.otherNodes(p) {
			out = append(out, c.mac(n)+" ("+n+")")
		}
		return out
	}
	cond := c.expectFailing(probers, "ARPConflict", named, fault)
	c.figure("strictARP off → LoadBalancerARPFailing=True on the API server", "%.1fs", cond.Seconds())
	firing, notified := c.expectAlert("IPVSGuardLoadBalancerIPARPConflict", map[string]string{"ip": ip.String(), "service": "default/web"}, fault)
	c.figure("strictARP off → ARP conflict alert firing in Prometheus", "%.1fs", firing.Seconds())
	c.figure("strictARP off → conflict notification at the webhook", "%.1fs", notified.Seconds())
	c.waitFor("StrictARPDisabled=True on every node", waitLong, func() (bool, string) {
		for _, n := range c.order {
			if cd := c.condition(n, "StrictARPDisabled"); cd.Status != corev1.ConditionTrue {
				return false, n + ": " + string(cd.Status) + " " + cd.Message
			}
		}
		return true, ""
	})
	c.expectArping(t, ip, probers, want)
	for _, p := range probers {
		if r := c.arpResult(p, ip); r != "conflict" {
			t.Errorf("node %s: ipvs_guard_arp_probe_result for %s is %q, want conflict", p, ip, r)
		}
		if n, wantN := c.arpResponders(p, ip), float64(len(want(p))); n != wantN {
			t.Errorf("node %s: ipvs_guard_arp_responders for %s is %v, want %v", p, ip, n, wantN)
		}
	}

	// The guest first (restart and sync take a while; the conflict stays
	// meanwhile), so the fix is timed from the namespace nodes' flip.
	if c.guest != nil {
		if err := c.setStrictARP(guestName, true); err != nil {
			t.Fatal(err)
		}
		c.guestWaitSynced()
	}
	fix := time.Now()
	for _, n := range c.order {
		if n == guestName {
			continue
		}
		if err := c.setStrictARP(n, true); err != nil {
			t.Fatal(err)
		}
	}
	c.expectAnswered(t, ip, announcer)
	c.figure("strictARP back on → LoadBalancerARPFailing=False", "%.1fs", time.Since(fix).Seconds())
	resolved := c.expectResolved("IPVSGuardLoadBalancerIPARPConflict", map[string]string{"ip": ip.String()}, fix)
	c.figure("strictARP back on → resolved notification at the webhook", "%.1fs", resolved.Seconds())
	c.expectEvents(t, probers, "LoadBalancerARPFailing", "ARPConflict")
}

// foreignHost plugs a host that is no node into the segment and gives it
// the LoadBalancer IP: its kernel answers besides the announcing speaker.
func (c *cluster) foreignHost(t *testing.T, ip netip.Addr, announcer string) {
	x, err := c.seg.AddNode(c.ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	probers := c.shardProbers(ip, announcer)
	fault := time.Now()
	if err := x.AddAddress(c.ctx, ip); err != nil {
		t.Fatal(err)
	}
	named := func(string) []string { return []string{c.mac(announcer) + " (" + announcer + ")", x.MAC} }
	d := c.expectFailing(probers, "ARPConflict", named, fault)
	c.figure("foreign host claims the IP → LoadBalancerARPFailing=True", "%.1fs", d.Seconds())
	want := []string{c.mac(announcer), x.MAC}
	slices.Sort(want)
	c.expectArping(t, ip, probers, func(string) []string { return want })
	for _, p := range probers {
		if r, n := c.arpResult(p, ip), c.arpResponders(p, ip); r != "conflict" || n != 2 {
			t.Errorf("node %s: /metrics says %s with %v responders for %s, want conflict with 2", p, r, n, ip)
		}
	}
	firing, notified := c.expectAlert("IPVSGuardLoadBalancerIPARPConflict", map[string]string{"ip": ip.String(), "service": "default/web"}, fault)
	c.figure("foreign host → conflict alert firing / notified", "%.1fs / %.1fs", firing.Seconds(), notified.Seconds())
	fix := time.Now()
	if err := x.DelAddress(c.ctx, ip); err != nil {
		t.Fatal(err)
	}
	c.expectAnswered(t, ip, announcer)
	resolved := c.expectResolved("IPVSGuardLoadBalancerIPARPConflict", map[string]string{"ip": ip.String()}, fix)
	c.figure("foreign host gone → resolved notification", "%.1fs", resolved.Seconds())
}

// sample is one observation of an IP during failover.
type sample struct {
	at     time.Time
	node   string // the observer
	result string // agent result, or "macs" for arping
	macs   []string
}

// failover SIGKILLs the announcing speaker and watches the IP from every
// prober's agent (its published result, polled every 100 ms) and from
// arping, until MetalLB has moved it and the agents agree; then the speaker
// comes back. It returns the announcer after all that.
func (c *cluster) failover(t *testing.T, ip netip.Addr, old string) string {
	// arping runs from a node no speaker runs on: a prober may become the
	// announcer, and a node never hears its own speaker's reply.
	observer := c.shardProbers(ip, old)[0]
	for _, n := range c.order {
		if c.mlb.Speakers[n] == nil {
			observer = n
			break
		}
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var samples []sample
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the agents, as they publish
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, n := range c.order {
				if r := c.arpResult(n, ip); r != "" {
					mu.Lock()
					samples = append(samples, sample{at: time.Now(), node: n, result: r})
					mu.Unlock()
				}
			}
		}
	}()
	go func() { // arping, one request at a time, from the first prober
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := c.arping(observer, ip, 1, time.Second)
			if err == nil {
				mu.Lock()
				samples = append(samples, sample{at: time.Now(), node: "arping@" + observer, result: "macs", macs: r.MACs})
				mu.Unlock()
			}
		}
	}()
	time.Sleep(2 * time.Second)
	kill := time.Now()
	c.mlb.Speakers[old].Kill()
	t.Logf("SIGKILLed the speaker on %s at %s", old, kill.Format("15:04:05.000"))
	next := c.waitAnnouncer("web", old)
	l2moved := time.Since(kill)
	c.expectAnswered(t, ip, next)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	// The agents' view, per agent: its last answered result before its
	// first other result after the kill, and its first reply after that
	// (answered, or wrong-responder while ServiceL2Status still named the
	// dead node). An agent publishes a result per probe, once a second.
	var during []string
	var agentFailover time.Duration
	for _, n := range c.order {
		var lastOld, firstNew time.Time
		gap := false
		for _, s := range samples {
			if s.node != n {
				continue
			}
			switch {
			case !gap && s.result == "answered":
				lastOld = s.at
			case !gap && s.at.After(kill):
				gap = true
			}
			if gap && firstNew.IsZero() {
				if s.result == "answered" || s.result == "wrong-responder" {
					firstNew = s.at
				} else if !slices.Contains(during, n+":"+s.result) {
					during = append(during, n+":"+s.result)
				}
			}
		}
		if gap && !lastOld.IsZero() && !firstNew.IsZero() {
			t.Logf("agent on %s: last answer %s, first reply after the gap %s", n, lastOld.Format("15:04:05.0"), firstNew.Format("15:04:05.0"))
			agentFailover = max(agentFailover, firstNew.Sub(lastOld))
		}
	}
	var aLastOld, aFirstNew time.Time
	oldMAC, newMAC := c.mac(old), c.mac(next)
	for _, s := range samples {
		if s.result != "macs" {
			continue
		}
		if slices.Equal(s.macs, []string{oldMAC}) {
			aLastOld = s.at
		}
		if aFirstNew.IsZero() && slices.Contains(s.macs, newMAC) {
			aFirstNew = s.at
		}
	}
	t.Logf("during failover the agents published %v", during)
	c.figure("SIGKILL → ServiceL2Status names the new node ("+next+")", "%.1fs", l2moved.Seconds())
	if agentFailover > 0 {
		c.figure("failover as the agents see it (last answer from "+old+" → first from "+next+")", "%.1fs", agentFailover.Seconds())
	} else {
		c.figure("failover as the agents see it", "no gap in the agents' 1s probes")
	}
	if !aFirstNew.IsZero() && !aLastOld.IsZero() {
		c.figure("failover as arping sees it (last reply from "+old+" → first from "+next+")", "%.1fs", aFirstNew.Sub(aLastOld).Seconds())
	}

	// The speaker comes back (a DaemonSet restarts it): MetalLB's election
	// is a hash over node and IP, so the IP may move back.
	if err := c.mlb.StartSpeaker(c.ctx, c.nodes[old]); err != nil {
		t.Fatal(err)
	}
	back := c.waitStableAnnouncer("web")
	c.expectAnswered(t, ip, back)
	return back
}

// waitStableAnnouncer waits until ServiceL2Status names the same node for 5 s.
func (c *cluster) waitStableAnnouncer(svc string) string {
	c.t.Helper()
	node, _ := c.waitStableAnnouncerSeen(svc)
	return node
}

// waitStableAnnouncerSeen is waitStableAnnouncer that also returns every
// node ServiceL2Status named on the way ("" for none): MetalLB may elect one
// speaker and then another while a new IP settles, and each announcer's
// probers may publish for the IP meanwhile.
func (c *cluster) waitStableAnnouncerSeen(svc string) (string, []string) {
	c.t.Helper()
	var node string
	seen := []string{""}
	since := time.Now()
	c.waitFor(svc+"'s announcer stays put for 5s", waitLong, func() (bool, string) {
		n := c.l2Status(svc)
		if n != node {
			node, since = n, time.Now()
		}
		if !slices.Contains(seen, n) {
			seen = append(seen, n)
		}
		return node != "" && time.Since(since) > 5*time.Second, "announcer " + node
	})
	return node, seen
}

// advertisementExcludes narrows the L2Advertisement so it excludes the node
// MetalLB elected, first by nodeSelectors, then by interfaces.
func (c *cluster) advertisementExcludes(t *testing.T, ip netip.Addr) {
	winner := c.l2Status("web")
	sel := map[string]any{"nodeSelectors": []any{map[string]any{"matchExpressions": []any{map[string]any{
		"key": "kubernetes.io/hostname", "operator": "NotIn", "values": []any{winner},
	}}}}}
	if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", sel); err != nil {
		t.Fatal(err)
	}
	moved := c.waitAnnouncer("web", winner)
	c.expectAnswered(t, ip, moved)
	t.Logf("nodeSelectors excluding %s: MetalLB elects among the selected nodes only; %s announces, the agents agree", winner, moved)

	// interfaces naming a link no node has: the speaker MetalLB elects
	// cannot announce, and nobody else does.
	before := c.probers(ip)
	fault := time.Now()
	if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", map[string]any{"interfaces": []any{"eth9"}}); err != nil {
		t.Fatal(err)
	}
	// MetalLB withdraws the ServiceL2Status; the agents then shard the IP
	// over every node (no announcer to leave out), so the nodes that probe
	// it may change: wait for the set the agents compute once they see it.
	c.waitFor("MetalLB withdraws web's ServiceL2Status", waitLong, func() (bool, string) {
		n := c.l2Status("web")
		return n == "", fmt.Sprintf("ServiceL2Status names %q", n)
	})
	probers := c.waitProbers(ip, "")
	t.Logf("interfaces [eth9]: probed by %v while %s announced it, by %v once no node does", before, moved, probers)
	d := c.expectFailing(probers, "ARPNoReply", func(string) []string { return []string{ip.String(), "no MAC answered"} }, fault)
	t.Logf("interfaces [eth9]: ServiceL2Status names %q; LoadBalancerARPFailing=True after %.1fs", c.l2Status("web"), d.Seconds())
	c.expectArping(t, ip, probers, func(string) []string { return nil })
	if err := metallbtest.ApplyL2Advertisement(c.ctx, c.dyn, "l2", nil); err != nil {
		t.Fatal(err)
	}
	back := c.waitStableAnnouncer("web")
	c.expectAnswered(t, ip, back)
}

// localWithoutSpeaker creates an externalTrafficPolicy: Local Service whose
// only endpoint is on d, which runs no speaker: MetalLB announces it from
// nowhere. Moving the endpoint to a node with a speaker fixes it.
func (c *cluster) localWithoutSpeaker(t *testing.T) {
	fault := time.Now()
	ip := c.service("local", corev1.ServiceExternalTrafficPolicyLocal, "d")
	probers := c.waitProbers(ip, "")
	d := c.expectFailing(probers, "ARPNoReply", func(string) []string { return []string{ip.String(), "no MAC answered"} }, fault)
	c.figure("eTP=Local, endpoint on a node without speaker → ARPNoReply", "%.1fs", d.Seconds())
	if n := c.l2Status("local"); n != "" {
		t.Errorf("ServiceL2Status names %s for a Service no speaker may announce", n)
	}
	c.expectArping(t, ip, probers, func(string) []string { return nil })
	firing, notified := c.expectAlert("IPVSGuardLoadBalancerIPNoARPReply", map[string]string{"ip": ip.String(), "service": "default/local"}, fault)
	c.figure("no reply → no-reply alert firing in Prometheus / notified", "%.1fs / %.1fs", firing.Seconds(), notified.Seconds())

	fix := time.Now()
	es, err := c.kube.DiscoveryV1().EndpointSlices("default").Get(c.ctx, "local-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := "c"
	es.Endpoints[0].NodeName = &node
	if _, err := c.kube.DiscoveryV1().EndpointSlices("default").Update(c.ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ann := c.waitAnnouncer("local", "")
	if ann != "c" {
		t.Errorf("ServiceL2Status names %s, want c (the only node with an endpoint and a speaker)", ann)
	}
	c.expectAnswered(t, ip, ann)
	resolved := c.expectResolved("IPVSGuardLoadBalancerIPNoARPReply", map[string]string{"ip": ip.String()}, fix)
	c.figure("endpoint moved to a speaker node → resolved notification", "%.1fs", resolved.Seconds())
	c.deleteService("local", ip)
}

// moduleMissing removes a module from node's --root tree (/proc/modules
// and /sys/module), as if it were unloaded, then puts it back.
func (c *cluster) moduleMissing(t *testing.T, node, module string) {
	tree := c.trees[node]
	procModules := filepath.Join(tree, "proc/modules")
	orig, err := os.ReadFile(procModules)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(orig), "\n") {
		if !strings.HasPrefix(l, module+" ") {
			kept = append(kept, l)
		}
	}
	sysDir := filepath.Join(tree, "sys/module", module)
	fault := time.Now()
	if err := os.Rename(sysDir, sysDir+".unloaded"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(procModules, []byte(strings.Join(kept, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	c.waitFor("IPVSModulesMissing=True on "+node, waitLong, func() (bool, string) {
		cd := c.condition(node, "IPVSModulesMissing")
		return cd.Status == corev1.ConditionTrue && strings.Contains(cd.Message, module), string(cd.Status) + " " + cd.Message
	})
	c.figure(module+" unloaded → IPVSModulesMissing=True", "%.1fs", time.Since(fault).Seconds())
	firing, notified := c.expectAlert("IPVSGuardModulesNotLoaded", map[string]string{"node": node, "module": module}, fault)
	c.figure(module+" unloaded → modules alert firing / notified", "%.1fs / %.1fs", firing.Seconds(), notified.Seconds())
	fix := time.Now()
	if err := os.Rename(sysDir+".unloaded", sysDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(procModules, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	resolved := c.expectResolved("IPVSGuardModulesNotLoaded", map[string]string{"node": node, "module": module}, fix)
	c.figure(module+" back → resolved notification", "%.1fs", resolved.Seconds())
}

// expectEvents checks that each node got exactly one Warning and one
// Normal Event for the transition into and out of reason.
func (c *cluster) expectEvents(t *testing.T, nodes []string, action, reason string) {
	t.Helper()
	for _, n := range nodes {
		got := 0
		for _, e := range c.events(n) {
			if e == action+"/"+reason {
				got++
			}
		}
		if got < 1 {
			t.Errorf("node %s: no %s Event with reason %s; events %v", n, action, reason, c.events(n))
		}
	}
}

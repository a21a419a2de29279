// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/peerstest"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// lbServiceWithIPs creates a LoadBalancer Service holding n ingress IPs
// 192.0.2.1… (MetalLB's controller would assign them).
func lbServiceWithIPs(t *testing.T, cs kubernetes.Interface, name string, n int) []netip.Addr {
	t.Helper()
	ctx := context.Background()
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ips []netip.Addr
	for i := range n {
		ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})
		ips = append(ips, ip)
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ips
}

// TestPeersFollowEndpointSlice runs an agent whose peers come from the
// peers Service's EndpointSlices on a real API server and moves them as the
// EndpointSlice controller would: another agent appears, turns unready,
// comes back, goes away. Each time the agent's share of the LoadBalancer IPs
// follows without a restart (exactly what rendezvous hashing over the ready
// agents gives it), and the ARP check re-runs at once, not at the next
// resync. The agent never watches a Node but its own.
func TestPeersFollowEndpointSlice(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	createNode(t, admin, "node-a")
	ips := lbServiceWithIPs(t, admin, "web", 64)
	svc := types.NamespacedName{Namespace: "ipvs-guard", Name: "ipvs-guard-peers"}
	peers, err := peerstest.Publish(ctx, admin, svc, []string{"node-a", "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	fakes := allFakeChecks()
	arp := fakes[len(fakes)-1]
	u := startAgent(t, s, "node-a", agentOptions{checks: fakes, resync: time.Hour, peers: svc})
	v := u.agent.View()

	// expect waits until the view's peers are want and node-a's targets are
	// the IPs rendezvous hashing over want gives it (k = 2).
	expect := func(step string, want []string) {
		t.Helper()
		assign := shard.NewAssigner(want, shard.DefaultK)
		var wantIPs []string
		for _, ip := range ips {
			if slices.Contains(assign.Probers(shard.IP{Addr: ip}), "node-a") {
				wantIPs = append(wantIPs, ip.String())
			}
		}
		var got []string
		var gotPeers []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			gotPeers, _ = v.Peers()
			ts, err := v.ARPTargets(shard.DefaultK)(ctx)
			got = nil
			for _, tg := range ts {
				got = append(got, tg.IP.String())
			}
			if err == nil && cmp.Equal(want, gotPeers) && cmp.Equal(wantIPs, got) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: peers %v (want %v); targets (-want +got):\n%s", step, gotPeers, want, cmp.Diff(wantIPs, got))
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s: %d peers, node-a probes %d of %d IPs", step, len(want), len(got), len(ips))
	}
	// set rewrites the slices and checks the ARP check ran again because of it.
	set := func(step string, nodes []string, unready map[string]bool, want []string) {
		t.Helper()
		runs := arp.runs.Load()
		if err := peers.Set(ctx, nodes, unready); err != nil {
			t.Fatal(err)
		}
		expect(step, want)
		eventually(t, 10*time.Second, step+": the ARP check re-runs", func() bool { return arp.runs.Load() > runs })
	}

	eventually(t, 10*time.Second, "view synced", v.HasSynced)
	// Headless Services (the peers Service here) are not watched, as
	// kube-proxy does not: no VIP, no LoadBalancer IP.
	svcs, err := v.Services()
	var names []string
	for _, s := range svcs {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	if err != nil || slices.Contains(names, svc.String()) || !slices.Contains(names, "default/web") {
		t.Errorf("Services in the view: %v, %v; want default/web and no headless one", names, err)
	}
	expect("two agents", []string{"node-a", "node-b"})
	set("node-c's agent ready", []string{"node-a", "node-b", "node-c"}, nil, []string{"node-a", "node-b", "node-c"})
	set("node-c's agent unready", []string{"node-a", "node-b", "node-c"}, map[string]bool{"node-c": true}, []string{"node-a", "node-b"})
	set("node-c's agent ready again, 250 more agents (3 slices)", peerNames(253), nil, peerNames(253))
	set("every other agent gone", []string{"node-a"}, nil, []string{"node-a"})
	// node-a alone probes every IP (it announces none of them).
	if ts, _ := v.ARPTargets(shard.DefaultK)(ctx); len(ts) != len(ips) {
		t.Errorf("alone, node-a probes %d of %d IPs", len(ts), len(ips))
	}
	// This node's own pod not listed (not ready yet): it still probes its
	// share of the others' IPs.
	set("node-a's own agent not listed", []string{"node-b"}, nil, []string{"node-a", "node-b"})

	// The Nodes it watched: its own only (field selector). The peers: one
	// namespaced, label-selected watch of EndpointSlices.
	for _, r := range u.log.Requests("/api/v1/nodes") {
		if strings.Contains(r, "watch=true") && !strings.Contains(r, "fieldSelector=metadata.name%3Dnode-a") {
			t.Errorf("a watch of Nodes other than its own: %s", r)
		}
	}
	var peerWatches []string
	for _, r := range u.log.Requests("/apis/discovery.k8s.io/v1/") {
		if strings.Contains(r, "service-name%3Dipvs-guard-peers") {
			peerWatches = append(peerWatches, r)
			if !strings.Contains(r, "/namespaces/ipvs-guard/endpointslices") {
				t.Errorf("the peers' slices read outside their namespace: %s", r)
			}
		}
	}
	if len(peerWatches) == 0 {
		t.Error("no list/watch of the peers' EndpointSlices")
	}
}

// peerNames is node-a, node-b, node-c and then peer-0003… up to n names.
func peerNames(n int) []string {
	out := []string{"node-a", "node-b", "node-c"}
	for i := 3; i < n; i++ {
		out = append(out, fmt.Sprintf("peer-%04d", i))
	}
	slices.Sort(out)
	return out
}

// TestMACNamingWithoutNodeWatch names MACs from the annotations other agents
// published, on a real API server, with requests bounded as the directory
// promises: one metadata GET for an announcer's MACs (then the cache), one
// metadata LIST to name a MAC nobody is known to own, none again for a MAC no
// Node published.
func TestMACNamingWithoutNodeWatch(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		createNode(t, admin, n)
	}
	for n, m := range map[string]string{"node-b": "02:00:00:00:00:0b", "node-c": "02:00:00:00:00:0c"} {
		if _, err := admin.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"{\"eth0\":\"%s\"}"}}}`, nodestatus.MACsAnnotation, m)), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	u := startAgent(t, s, "node-a", agentOptions{checks: allFakeChecks(), resync: time.Hour})
	v := u.agent.View()
	eventually(t, 10*time.Second, "view synced", v.HasSynced)
	dir := v.MACDirectory()
	nodeReads := func() (gets, lists int) {
		for _, r := range u.log.Requests("/api/v1/nodes") {
			switch {
			case strings.HasPrefix(r, "GET /api/v1/nodes/node-b"), strings.HasPrefix(r, "GET /api/v1/nodes/node-c"):
				gets++
			case strings.HasPrefix(r, "GET /api/v1/nodes?") && !strings.Contains(r, "fieldSelector"):
				lists++
			}
		}
		return gets, lists
	}

	for range 3 {
		if got := dir.NodeMACs(ctx, "node-b", false); len(got) != 1 || got[0].String() != "02:00:00:00:00:0b" {
			t.Fatalf("NodeMACs(node-b) = %v", got)
		}
	}
	if g, l := nodeReads(); g != 1 || l != 0 {
		t.Errorf("node-b's MACs three times: %d GETs, %d LISTs; want 1, 0", g, l)
	}
	macC, _ := parseMAC("02:00:00:00:00:0c")
	if _, ok := dir.NodeForMAC(ctx, macC, false); ok {
		t.Error("node-c's MAC named before anything read it")
	}
	if n, ok := dir.NodeForMAC(ctx, macC, true); !ok || n != "node-c" {
		t.Errorf("NodeForMAC(node-c's MAC) = %q %v", n, ok)
	}
	foreign, _ := parseMAC("02:00:00:00:00:ff")
	for range 3 {
		if n, ok := dir.NodeForMAC(ctx, foreign, true); ok {
			t.Errorf("a MAC no Node published named %q", n)
		}
	}
	if g, l := nodeReads(); g != 1 || l != 1 {
		t.Errorf("after naming: %d GETs, %d LISTs; want 1, 1", g, l)
	}
	// The LIST read node-c too: no GET for its MACs now.
	if got := dir.NodeMACs(ctx, "node-c", false); len(got) != 1 {
		t.Errorf("NodeMACs(node-c) = %v", got)
	}
	if g, l := nodeReads(); g != 1 || l != 1 {
		t.Errorf("node-c after the LIST: %d GETs, %d LISTs; want 1, 1", g, l)
	}
	// The agent's only Node watch is its own Node's.
	for _, r := range u.log.Requests("/api/v1/nodes") {
		if strings.Contains(r, "watch=true") && !strings.Contains(r, "fieldSelector=metadata.name%3Dnode-a") {
			t.Errorf("a watch of Nodes other than its own: %s", r)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

// peersSlice is an EndpointSlice of the peers Service ns/svc as the
// EndpointSlice controller writes it for a headless Service: one ready
// endpoint per node.
func peersSlice(ns, svc string, nodes ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-abcde", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, "service.kubernetes.io/headless": ""}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i, n := range nodes {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ref(true)}, NodeName: ref(n)})
	}
	return es
}

func ref[T any](v T) *T { return &v }

func TestParsePeersService(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want types.NamespacedName
		err  bool
	}{
		{in: ""},
		{in: "ipvs-guard/ipvs-guard-peers", want: types.NamespacedName{Namespace: "ipvs-guard", Name: "ipvs-guard-peers"}},
		{in: "peers", err: true},
		{in: "/peers", err: true},
		{in: "ns/", err: true},
		{in: "a/b/c", err: true},
	} {
		got, err := ParsePeersService(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParsePeersService(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// TestPeersFromEndpointSlices reads the peers from the peers Service's
// slices only: ready endpoints (no condition counts as ready), any number
// of slices, never another Service's or another namespace's, and always
// this node.
func TestPeersFromEndpointSlices(t *testing.T) {
	second := peersSlice("ipvs-guard", "peers", "d", "e", "f")
	second.Name = "peers-fghij"
	second.Endpoints[1].Conditions.Ready = ref(false)                                                  // e: not ready
	second.Endpoints[2].Conditions.Ready = nil                                                         // f: unknown, counts as ready
	second.Endpoints = append(second.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.9"}}) // no node
	other := peersSlice("ipvs-guard", "metrics", "x")
	elsewhere := peersSlice("kube-system", "peers", "y")
	cs := fake.NewClientset(peersSlice("ipvs-guard", "peers", "c", "b"), second, other, elsewhere)
	logged := captureKlog(t) // before any informer runs: klog's logger is not swapped under them
	v := New("a", kubetest.FromClientset(cs), nil, nil)
	v.UsePeersService(types.NamespacedName{Namespace: "ipvs-guard", Name: "peers"})
	if _, err := v.Peers(); err == nil {
		t.Error("peers before the informer synced")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	v.Start(ctx.Done())
	defer v.Shutdown()
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), v.HasSynced) {
		t.Fatal("caches did not sync")
	}
	got, err := v.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "d", "f"}, got); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
	// Every ARP run reads the peers: it must not log (client-go logs a
	// warning when a lister lists by namespace without a namespace index).
	for _, l := range logged() {
		if strings.Contains(l, "index") {
			t.Errorf("reading the peers logged: %s", l)
		}
	}
}

// captureKlog routes klog's global logger (what client-go's listers log
// through) to a buffer until the test ends, and returns what was logged.
// Tests using it must not run in parallel, and must call it before they
// start a goroutine that logs and stop those before they end.
func captureKlog(t *testing.T) func() []string {
	t.Helper()
	var mu sync.Mutex
	var lines []string
	klog.SetLogger(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1}))
	t.Cleanup(klog.ClearLogger)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// TestShardMemo checks the memo answers as the assigner does, for a run over
// new peers too, and forgets IPs a run did not ask about.
func TestShardMemo(t *testing.T) {
	var m shardMemo
	ips := make([]shard.IP, 200)
	for i := range ips {
		ips[i] = shard.IP{Addr: netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(i%250 + 1)}), Announcer: fmt.Sprintf("n%d", i%7)}
	}
	for _, peers := range [][]string{{"n0", "n1", "n2", "n3"}, {"n0", "n1", "n2", "n3"}, {"n0", "n2", "n3"}, {"n0", "n1", "n2", "n3", "n4", "n5", "n6"}} {
		for _, k := range []int{1, 2} {
			a := shard.NewAssigner(peers, k)
			probes, done := m.filter(peers, k, "n2")
			for _, ip := range ips {
				if got, want := probes(ip), slices.Contains(a.Probers(ip), "n2"); got != want {
					t.Fatalf("peers %v k %d: %v probed by n2 = %v, want %v", peers, k, ip, got, want)
				}
			}
			done()
		}
	}
	probes, done := m.filter([]string{"n0", "n1", "n2", "n3", "n4", "n5", "n6"}, 2, "n2")
	probes(ips[0])
	done()
	if len(m.mine) != 1 {
		t.Errorf("memo holds %d IPs after a run that asked about 1", len(m.mine))
	}
}

// BenchmarkShardRun is one ARP run's "which IPs are mine" at 5,000 IPs and
// 1,000 peers: hashing every IP against every peer (every run before the
// memo), and through the memo once it holds the IPs (every later run while
// the peers stay the same).
func BenchmarkShardRun(b *testing.B) {
	peers := make([]string, 1000)
	for i := range peers {
		peers[i] = fmt.Sprintf("node-%04d", i)
	}
	ips := make([]shard.IP, 5000)
	for i := range ips {
		ips[i] = shard.IP{Addr: netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(i%250 + 1)}), Announcer: peers[i%len(peers)]}
	}
	b.Run("assigner", func(b *testing.B) {
		for range b.N {
			a := shard.NewAssigner(peers, shard.DefaultK)
			for _, ip := range ips {
				_ = slices.Contains(a.Probers(ip), "node-0007")
			}
		}
	})
	b.Run("memo", func(b *testing.B) {
		var m shardMemo
		probes, done := m.filter(peers, shard.DefaultK, "node-0007")
		for _, ip := range ips {
			probes(ip)
		}
		done()
		b.ResetTimer()
		for range b.N {
			probes, done := m.filter(peers, shard.DefaultK, "node-0007")
			for _, ip := range ips {
				probes(ip)
			}
			done()
		}
	})
}

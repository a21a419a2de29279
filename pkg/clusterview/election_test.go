// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

// TestSortCandidates checks the port of MetalLB v0.16.2's sortL2Candidates
// against the orders MetalLB's own tests expect (speaker/layer2_controller_test.go).
func TestSortCandidates(t *testing.T) {
	tests := []struct {
		name       string
		candidates []string
		ip         string
		scores     map[string]int64
		want       []string
	}{
		{name: "single", candidates: []string{"node-a"}, ip: "10.0.0.1", want: []string{"node-a"}},
		{name: "no scores: hash order", candidates: []string{"node-a", "node-b", "node-c"}, ip: "10.0.0.1", want: []string{"node-b", "node-a", "node-c"}},
		{name: "no scores: the order depends on the IP", candidates: []string{"node-a", "node-b", "node-c"}, ip: "10.0.0.2", want: []string{"node-b", "node-c", "node-a"}},
		{name: "highest score wins whatever the hash", candidates: []string{"edge-a", "edge-b", "worker-a", "worker-b"}, ip: "10.20.30.1",
			scores: map[string]int64{"edge-a": 100}, want: []string{"edge-a", "edge-b", "worker-a", "worker-b"}},
		{name: "equal scores fall through to the hash", candidates: []string{"node-a", "node-b"}, ip: "10.20.30.1",
			scores: map[string]int64{"node-a": 100, "node-b": 100}, want: []string{"node-b", "node-a"}},
		{name: "preferred group by hash, the others after", candidates: []string{"edge-a", "edge-b", "worker-a"}, ip: "10.20.30.1",
			scores: map[string]int64{"edge-a": 100, "edge-b": 100}, want: []string{"edge-b", "edge-a", "worker-a"}},
		{name: "an IPv4-mapped address hashes as IPv4", candidates: []string{"node-a", "node-b", "node-c"}, ip: "::ffff:10.0.0.1", want: []string{"node-b", "node-a", "node-c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for shift := range len(tt.candidates) {
				got := append(slices.Clone(tt.candidates[shift:]), tt.candidates[:shift]...)
				sortCandidates(got, netip.MustParseAddr(tt.ip), tt.scores)
				if !slices.Equal(got, tt.want) {
					t.Fatalf("sortCandidates(%v, %s, %v) = %v, want %v", tt.candidates, tt.ip, tt.scores, got, tt.want)
				}
			}
		})
	}
}

// ad parses an L2Advertisement spec as the view reads it.
func ad(name string, spec map[string]any) l2Ad {
	return parseAd(*metallbObj("L2Advertisement", name, nil, spec))
}

func prefer(weight int, lbls map[string]any) map[string]any {
	return map[string]any{"weight": int64(weight), "preference": map[string]any{"matchLabels": lbls}}
}

// TestPreferredScores checks the port of MetalLB v0.16.2's
// preferredNodeScores (per advertisement, over the nodes its nodeSelectors
// select) and preferredScoresFor (summed over the advertisements).
func TestPreferredScores(t *testing.T) {
	nodes := map[string]nodeInfo{
		"edge-a":   {labels: map[string]string{"role": "edge", "zone": "primary"}},
		"edge-b":   {labels: map[string]string{"role": "edge", "zone": "secondary"}},
		"worker-a": {labels: map[string]string{"role": "worker", "zone": "primary"}},
		"worker-b": {labels: map[string]string{"role": "worker"}},
	}
	tests := []struct {
		name string
		ads  []l2Ad
		want map[string]int64
	}{
		{name: "no preferences", ads: []l2Ad{ad("a", map[string]any{})}},
		{name: "one selector", ads: []l2Ad{ad("a", map[string]any{"preferredNodeSelectors": []any{prefer(100, map[string]any{"role": "edge"})}})},
			want: map[string]int64{"edge-a": 100, "edge-b": 100}},
		{name: "weights of one advertisement sum", ads: []l2Ad{ad("a", map[string]any{"preferredNodeSelectors": []any{
			prefer(60, map[string]any{"zone": "primary"}), prefer(50, map[string]any{"role": "edge"})}})},
			want: map[string]int64{"edge-a": 110, "edge-b": 50, "worker-a": 60}},
		{name: "only nodes the nodeSelectors select score", ads: []l2Ad{ad("a", map[string]any{
			"nodeSelectors":          []any{map[string]any{"matchLabels": map[string]any{"role": "edge"}}},
			"preferredNodeSelectors": []any{prefer(100, map[string]any{"zone": "primary"})}})},
			want: map[string]int64{"edge-a": 100}},
		{name: "empty preference matches every selected node", ads: []l2Ad{ad("a", map[string]any{"preferredNodeSelectors": []any{
			map[string]any{"weight": int64(10), "preference": map[string]any{}}}})},
			want: map[string]int64{"edge-a": 10, "edge-b": 10, "worker-a": 10, "worker-b": 10}},
		{name: "no match", ads: []l2Ad{ad("a", map[string]any{"preferredNodeSelectors": []any{prefer(50, map[string]any{"role": "gpu"})}})}},
		{name: "advertisements sum", ads: []l2Ad{
			ad("a", map[string]any{"preferredNodeSelectors": []any{prefer(30, map[string]any{"role": "edge"})}}),
			ad("b", map[string]any{"preferredNodeSelectors": []any{prefer(20, map[string]any{"zone": "primary"})}}),
		}, want: map[string]int64{"edge-a": 50, "edge-b": 30, "worker-a": 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := preferredScores(tt.ads, nodes); !maps.Equal(got, tt.want) {
				t.Errorf("preferredScores() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestNotPreferred checks the advisory: the announcer weighs less than the
// node the election prefers among the eligible nodes.
func TestNotPreferred(t *testing.T) {
	p := pool{name: "pool", ranges: []addrRange{{netip.MustParseAddr("192.0.2.0"), netip.MustParseAddr("192.0.2.255")}}}
	zoneA := ad("zone-a", map[string]any{"preferredNodeSelectors": []any{prefer(50, map[string]any{"zone": "a"})}})
	zoneB := ad("zone-b", map[string]any{"preferredNodeSelectors": []any{prefer(10, map[string]any{"zone": "b"})}})
	nodes := map[string]nodeInfo{
		"n1": {labels: map[string]string{"zone": "a"}},
		"n2": {labels: map[string]string{"zone": "b"}},
		"n3": {},
	}
	all := map[string]bool{"n1": true, "n2": true, "n3": true}
	web := lbService("default", "web", "192.0.2.20")
	local := lbService("default", "web", "192.0.2.20")
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	tests := []struct {
		name      string
		ads       []l2Ad
		nodes     map[string]nodeInfo
		speakers  map[string]bool
		svc       *corev1.Service
		eps       []string
		announcer string
		want      string // preferred node; "" for no finding
		says      []string
	}{
		{name: "the preferred node announces", ads: []l2Ad{zoneA, zoneB}, announcer: "n1"},
		{name: "a lighter node announces", ads: []l2Ad{zoneA, zoneB}, announcer: "n2", want: "n1",
			says: []string{"announced by node n2 (preference weight 10)", "prefer node n1 (weight 50)", "L2Advertisement metallb-system/zone-a, metallb-system/zone-b", "eligible nodes n1, n2, n3"}},
		{name: "an unweighted node announces", ads: []l2Ad{zoneA, zoneB}, announcer: "n3", want: "n1"},
		{name: "no preferences", ads: []l2Ad{ad("l2", map[string]any{})}, announcer: "n3"},
		{name: "the preferred node has no ready speaker", ads: []l2Ad{zoneA, zoneB}, speakers: map[string]bool{"n2": true, "n3": true}, announcer: "n2"},
		{name: "the preferred node is excluded", ads: []l2Ad{zoneA, zoneB}, announcer: "n2",
			nodes: map[string]nodeInfo{"n1": {labels: map[string]string{"zone": "a"}, excluded: true}, "n2": nodes["n2"], "n3": {}}},
		{name: "the label moved to n3", ads: []l2Ad{zoneA, zoneB}, announcer: "n2", want: "n3",
			nodes: map[string]nodeInfo{"n1": {}, "n2": nodes["n2"], "n3": {labels: map[string]string{"zone": "a"}}}},
		{name: "local: only nodes with an endpoint", ads: []l2Ad{zoneA, zoneB}, svc: local, eps: []string{"n2", "n3"}, announcer: "n2"},
		{name: "local: the endpoint's node is preferred", ads: []l2Ad{zoneA, zoneB}, svc: local, eps: []string{"n1", "n3"}, announcer: "n3", want: "n1"},
		{name: "service selectors leave out the weighted advertisement", announcer: "n2",
			ads: []l2Ad{ad("zone-a", map[string]any{"serviceSelectors": []any{map[string]any{"matchLabels": map[string]any{"app": "db"}}},
				"preferredNodeSelectors": []any{prefer(50, map[string]any{"zone": "a"})}}), zoneB}},
		{name: "the lightest weighted node among several", ads: []l2Ad{zoneA, zoneB}, announcer: "n2", want: "n1",
			nodes: map[string]nodeInfo{"n1": {labels: map[string]string{"zone": "a"}}, "n2": nodes["n2"], "n3": {labels: map[string]string{"zone": "a"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &metallbState{pools: []pool{p}, ads: tt.ads, nodes: tt.nodes, speakers: tt.speakers}
			if st.nodes == nil {
				st.nodes = nodes
			}
			if st.speakers == nil {
				st.speakers = all
			}
			svc := tt.svc
			if svc == nil {
				svc = web
			}
			in := LoadBalancerIngress{IP: netip.MustParseAddr("192.0.2.20"), Service: types.NamespacedName{Namespace: "default", Name: "web"}, AnnouncingNode: tt.announcer}
			got, _ := notPreferred(st, DefaultMetalLBNamespace, in, svc, func() []string { return tt.eps })
			if (got == nil) != (tt.want == "") {
				t.Fatalf("notPreferred() = %+v, want preferred %q", got, tt.want)
			}
			if got == nil {
				return
			}
			if got.Preferred != tt.want || got.Announcer != tt.announcer || got.PreferredWeight <= got.AnnouncerWeight {
				t.Errorf("notPreferred() = %+v, want %s preferred over %s", got, tt.want, tt.announcer)
			}
			if s := got.State().ARPPreference; s == nil || s.Preferred != tt.want || s.Announcer != tt.announcer || s.IP != "192.0.2.20" {
				t.Errorf("State() = %+v", s)
			}
			for _, s := range tt.says {
				if !strings.Contains(got.Message, s) {
					t.Errorf("message %q does not say %q", got.Message, s)
				}
			}
		})
	}
}

// TestPreferencesReads checks when the advisory reads MetalLB's state:
// once for an announcer it has not judged, again after a change of
// announcer (even within the TTL), never while the preferred node stays
// the announcer.
func TestPreferencesReads(t *testing.T) {
	cs := fake.NewClientset(clusterNode("n1", map[string]string{"zone": "a"}, false), clusterNode("n2", nil, false),
		lbService("default", "web", "192.0.2.20"), endpointSlice("web", true, "n1"))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), metallbListKinds,
		metallbObj("IPAddressPool", "pool", nil, map[string]any{"addresses": []any{"192.0.2.0/24"}}),
		metallbObj("L2Advertisement", "zone-a", nil, map[string]any{"preferredNodeSelectors": []any{prefer(50, map[string]any{"zone": "a"})}}),
		speakerPod("n1", true), speakerPod("n2", true))
	v := New("self", kubetest.FromClientset(cs), dyn, metaOf(cs))
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	v.metallb.clock = clk
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer v.Shutdown()
	defer cancel()
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	lists := func() int {
		n := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "list" && a.GetResource() == IPAddressPoolGVR {
				n++
			}
		}
		return n
	}
	target := func(announcer string) []arpcheck.Target {
		return []arpcheck.Target{{IP: netip.MustParseAddr("192.0.2.20"), ExpectedNode: announcer, Service: "default/web"}}
	}
	steps := []struct {
		name      string
		announcer string
		reads     int
		preferred string // of the finding; "" for none
		wait      time.Duration
	}{
		{name: "first sight reads", announcer: "n2", reads: 1, preferred: "n1"},
		{name: "a standing advisory within the TTL reuses the state", announcer: "n2", reads: 1, preferred: "n1"},
		{name: "the announcer moves: read again within the TTL", announcer: "n1", reads: 2},
		{name: "the preferred node stays: no read", announcer: "n1", reads: 2},
		{name: "no announcer: nothing judged", announcer: "", reads: 2},
		{name: "back to the preferred node: read (a change)", announcer: "n1", reads: 3},
		{name: "weighted: judged again after the recheck", announcer: "n1", reads: 4, wait: preferenceRecheck * MetalLBStateTTL},
	}
	for _, s := range steps {
		clk.SetTime(clk.Now().Add(time.Second + s.wait))
		got := v.preferences(ctx, target(s.announcer))
		if n := lists(); n != s.reads {
			t.Errorf("%s: %d pool LISTs, want %d", s.name, n, s.reads)
		}
		switch {
		case s.preferred == "" && len(got) != 0:
			t.Errorf("%s: findings %+v, want none", s.name, got)
		case s.preferred != "" && (len(got) != 1 || got[0].Preferred != s.preferred || got[0].PreferredWeight != 50 || got[0].AnnouncerWeight != 0):
			t.Errorf("%s: findings %+v, want %s preferred with weight 50", s.name, got, s.preferred)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

func sharedService(name, key string, local bool, selector map[string]string, ports ...int32) *corev1.Service {
	s := lbService("default", name, "192.0.2.50")
	if key != "" {
		s.Annotations = map[string]string{AllowSharedIPAnnotation: key}
	}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	s.Spec.Selector = selector
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: p, Protocol: corev1.ProtocolTCP})
	}
	return s
}

// TestSharingProblem follows MetalLB's allocator (v0.16.2): sharingOK and
// the port check of checkSharing.
func TestSharingProblem(t *testing.T) {
	app := map[string]string{"app": "x"}
	tests := []struct {
		name string
		a, b *corev1.Service
		want string // "" when MetalLB lets them share
	}{
		{name: "same key, distinct ports", a: sharedService("a", "k", false, nil, 80), b: sharedService("b", "k", false, nil, 443)},
		{name: "no key", a: sharedService("a", "", false, nil, 80), b: sharedService("b", "", false, nil, 443), want: "neither carries"},
		{name: "one key", a: sharedService("a", "k", false, nil, 80), b: sharedService("b", "", false, nil, 443), want: "only one carries"},
		{name: "different keys", a: sharedService("a", "k", false, nil, 80), b: sharedService("b", "j", false, nil, 443), want: `keys differ ("k", "j")`},
		{name: "same port", a: sharedService("a", "k", false, nil, 80), b: sharedService("b", "k", false, nil, 80), want: "both use port 80/TCP"},
		{name: "same port, other protocol", a: sharedService("a", "k", false, nil, 53), b: func() *corev1.Service {
			s := sharedService("b", "k", false, nil, 53)
			s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
			return s
		}()},
		{name: "local, same selector", a: sharedService("a", "k", true, app, 80), b: sharedService("b", "k", true, app, 443)},
		{name: "local, other selector", a: sharedService("a", "k", true, app, 80), b: sharedService("b", "k", true, map[string]string{"app": "y"}, 443), want: "same selector"},
		{name: "deprecated key", a: sharedService("a", "k", false, nil, 80), b: func() *corev1.Service {
			s := sharedService("b", "", false, nil, 443)
			s.Annotations = map[string]string{DeprecatedAllowSharedIPAnnotation: "k"}
			return s
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sharingProblem(tt.a, tt.b)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("sharingProblem() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConflictCheck(t *testing.T) {
	withAddr := func(n *corev1.Node, typ corev1.NodeAddressType, ip string) *corev1.Node {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: typ, Address: ip})
		return n
	}
	answered := check.Result{Name: check.NameARP, Status: check.StatusOK, Reason: arpcheck.ReasonAnswered, Message: "every IP this node probes answered ARP by exactly one MAC"}
	noReply := check.Result{Name: check.NameARP, Status: check.StatusProblem, Reason: arpcheck.ReasonNoReply, Message: "1 IP(s) fail ARP: x"}
	tests := []struct {
		name     string
		objs     []*corev1.Service
		self     *corev1.Node
		others   []*corev1.Node // other Nodes, running no agent
		ifs      arpcheck.LocalInterfaces
		inner    check.Result
		want     check.Result // Status, Reason
		says     []string
		kinds    []string // of the conflict findings, in order
		notProbe bool     // another node probes the IPs
	}{
		{name: "no conflict", objs: []*corev1.Service{lbService("default", "web", "192.0.2.20")}, self: node("self", true, ""),
			ifs:   arpcheck.LocalInterfaces{"eth0": {netip.MustParsePrefix("192.0.2.2/24")}, "kube-ipvs0": {netip.MustParsePrefix("192.0.2.20/32")}},
			inner: answered, want: answered},
		{name: "two services, one IP", objs: []*corev1.Service{sharedService("a", "", false, nil, 80), sharedService("b", "", false, nil, 80)}, self: node("self", true, ""),
			inner: answered, want: check.Result{Status: check.StatusProblem, Reason: ReasonLBIPConflict},
			says: []string{"192.0.2.50 is the LoadBalancer IP of both Service default/a and Service default/b", "neither carries"}, kinds: []string{ConflictService}},
		{name: "two services sharing legally", objs: []*corev1.Service{sharedService("a", "k", false, nil, 80), sharedService("b", "k", false, nil, 443)}, self: node("self", true, ""),
			inner: answered, want: answered},
		{name: "node address", objs: []*corev1.Service{lbService("default", "web", "192.0.2.2")}, self: withAddr(node("self", true, ""), corev1.NodeInternalIP, "192.0.2.2"),
			ifs:   arpcheck.LocalInterfaces{"eth0": {netip.MustParsePrefix("192.0.2.2/24")}},
			inner: noReply, want: check.Result{Status: check.StatusProblem, Reason: ReasonLBIPConflict},
			says: []string{"192.0.2.2 is the LoadBalancer IP of Service default/web and the InternalIP of node self", "; 1 IP(s) fail ARP: x"}, kinds: []string{ConflictNodeAddress}},
		{name: "interface", objs: []*corev1.Service{lbService("default", "web", "192.0.2.20")}, self: node("self", true, ""),
			ifs:   arpcheck.LocalInterfaces{"eth0": {netip.MustParsePrefix("192.0.2.2/24"), netip.MustParsePrefix("192.0.2.20/32")}, "kube-ipvs0": {netip.MustParsePrefix("192.0.2.20/32")}},
			inner: check.Skipped(check.NameARP, arpcheck.ReasonNoTargets, "no LoadBalancer IPs to probe"), want: check.Result{Status: check.StatusProblem, Reason: ReasonLBIPConflict},
			says: []string{"sits on interface eth0 of node self", "ip address del 192.0.2.20/32 dev eth0"}, kinds: []string{ConflictInterface}},
		{name: "address of a node without an agent", objs: []*corev1.Service{lbService("default", "web", "192.0.2.3")}, self: node("self", true, ""),
			others: []*corev1.Node{withAddr(node("cp", true, ""), corev1.NodeInternalIP, "192.0.2.3")},
			inner:  answered, want: check.Result{Status: check.StatusProblem, Reason: ReasonLBIPConflict},
			says: []string{"192.0.2.3 is the LoadBalancer IP of Service default/web and the InternalIP of node cp"}, kinds: []string{ConflictNodeAddress}},
		{name: "address of a node, IP another node probes", notProbe: true, objs: []*corev1.Service{lbService("default", "web", "192.0.2.3")}, self: node("self", true, ""),
			others: []*corev1.Node{withAddr(node("cp", true, ""), corev1.NodeExternalIP, "192.0.2.3")},
			inner:  answered, want: answered},
		{name: "service conflict of an IP another node probes", notProbe: true, objs: []*corev1.Service{sharedService("a", "", false, nil, 80), sharedService("b", "", false, nil, 80)}, self: node("self", true, ""),
			inner: answered, want: answered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(tt.self)
			for _, n := range tt.others {
				if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range tt.objs {
				if _, err := cs.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			v := New("self", kubetest.FromClientset(cs), nil, metaOf(cs))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer v.Shutdown()
			defer cancel()
			if err := v.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			probed := map[netip.Addr]bool{}
			if !tt.notProbe {
				probed = trackedIPs(ctx, t, v.ARPTargets(0))
			}
			got := withConflicts(tt.inner, v.conflicts(ctx, probed, func() (arpcheck.LocalInterfaces, error) { return tt.ifs, nil }, tt.inner.Status == check.StatusProblem))
			if got.Status != tt.want.Status || got.Reason != tt.want.Reason {
				t.Fatalf("result %s/%s (%s), want %s/%s", got.Status, got.Reason, got.Message, tt.want.Status, tt.want.Reason)
			}
			for _, s := range tt.says {
				if !strings.Contains(got.Message, s) {
					t.Errorf("message %q does not say %q", got.Message, s)
				}
			}
			var kinds []string
			for _, f := range got.Findings {
				if c, ok := f.(Conflict); ok {
					kinds = append(kinds, c.Kind)
					if st := c.State().LBIPConflict; st == nil || st.Owner == "" || st.Other == "" {
						t.Errorf("conflict %+v publishes %+v, want both claimants", c, st)
					}
				}
			}
			if strings.Join(kinds, ",") != strings.Join(tt.kinds, ",") {
				t.Errorf("conflict findings %v, want %v", kinds, tt.kinds)
			}
		})
	}
}

// trackedIPs returns the IPs src yields.
func trackedIPs(ctx context.Context, t *testing.T, src arpcheck.TargetSource) map[netip.Addr]bool {
	t.Helper()
	ts, err := src(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]bool{}
	for _, x := range ts {
		out[x.IP] = true
	}
	return out
}

// TestNodeAddressConflictReads checks when every Node is read for the
// addresses of nodes without an agent: on the first run, on a problem, and
// while a conflict stands; a new IP is compared with the addresses last
// read, and nothing is read while the probed IPs stay answered.
func TestNodeAddressConflictReads(t *testing.T) {
	cp := node("cp", true, "")
	cp.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.3"}}
	cs := fake.NewClientset(node("self", true, ""), cp, lbService("default", "web", "192.0.2.20"))
	v := New("self", kubetest.FromClientset(cs), nil, metaOf(cs))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer v.Shutdown()
	defer cancel()
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	lists := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" && a.(interface {
				GetListRestrictions() k8stesting.ListRestrictions
			}).GetListRestrictions().Fields.Empty() {
				n++
			}
		}
		return n
	}
	lb := map[netip.Addr]string{netip.MustParseAddr("192.0.2.20"): "default/web", netip.MustParseAddr("192.0.2.3"): "default/other"}
	expire := func() {
		v.metallb.mu.Lock()
		if v.metallb.state != nil {
			v.metallb.state.read = v.metallb.state.read.Add(-MetalLBStateTTL)
		}
		v.metallb.mu.Unlock()
	}
	web := map[netip.Addr]bool{netip.MustParseAddr("192.0.2.20"): true}
	steps := []struct {
		name     string
		probed   map[netip.Addr]bool
		problem  bool
		reads    int // Node LISTs after the step
		conflict bool
	}{
		{name: "first run reads", probed: web, reads: 1},
		{name: "same IPs answered: no read", probed: web, reads: 1},
		{name: "a problem reads", probed: web, problem: true, reads: 2},
		{name: "answered again: no read", probed: web, reads: 2},
		{name: "a new IP: compared with the addresses read, no read", probed: map[netip.Addr]bool{netip.MustParseAddr("192.0.2.20"): true, netip.MustParseAddr("192.0.2.3"): true}, reads: 2, conflict: true},
		{name: "a standing conflict reads", probed: map[netip.Addr]bool{netip.MustParseAddr("192.0.2.20"): true, netip.MustParseAddr("192.0.2.3"): true}, reads: 3, conflict: true},
		{name: "the IP gone: the conflict stood, so read once more", probed: web, reads: 4},
		{name: "answered: no read", probed: web, reads: 4},
	}
	for _, s := range steps {
		expire()
		got := v.allNodeAddressConflicts(ctx, s.probed, lb, s.problem)
		if n := lists(); n != s.reads {
			t.Errorf("%s: %d Node LISTs, want %d", s.name, n, s.reads)
		}
		if (len(got) > 0) != s.conflict {
			t.Errorf("%s: conflicts %+v, want any: %v", s.name, got, s.conflict)
		}
	}
}

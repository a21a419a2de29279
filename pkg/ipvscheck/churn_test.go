// SPDX-License-Identifier: Apache-2.0

package ipvscheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs/ipvstest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// churnCluster is n LoadBalancer Services, each with one ready endpoint, and
// the table kube-proxy programs for them; broken makes the first
// LoadBalancer virtual server use another scheduler.
func churnCluster(n int, broken bool) ([]corev1.Service, []discoveryv1.EndpointSlice, ipvs.Table) {
	var svcs []corev1.Service
	var eps []discoveryv1.EndpointSlice
	var tbl ipvs.Table
	for i := range n {
		name := fmt.Sprintf("lb-%d", i)
		cip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		lbip := fmt.Sprintf("192.0.%d.%d", 2+i/250, i%250+1)
		s := svc("default", name, corev1.ServiceTypeLoadBalancer, cip, port("", 80, corev1.ProtocolTCP))
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbip}}
		svcs = append(svcs, s)
		eps = append(eps, slice("default", name, discoveryv1.AddressTypeIPv4, "", corev1.ProtocolTCP, ep{addr: "10.244.0.5", node: node}))
		sched := "lc"
		if broken && i == 0 {
			sched = "rr"
		}
		tbl = append(tbl, entry(cip, 80, ipvs.TCP, "lc", rs("10.244.0.5")), entry(lbip, 80, ipvs.TCP, sched, rs("10.244.0.5")))
	}
	return svcs, eps, tbl
}

// TestMessageIgnoresServiceChurn: every node programs every Service, so a
// message that depends on the Service count or list turns one Service
// change into a Node write on every node. Neither the healthy message nor a
// problem about one virtual server may change when other Services come and go.
func TestMessageIgnoresServiceChurn(t *testing.T) {
	tests := []struct {
		name       string
		broken     bool
		noCluster  bool
		wantStatus check.Status
	}{
		{name: "healthy", wantStatus: check.StatusOK},
		{name: "one scheduler mismatch", broken: true, wantStatus: check.StatusProblem},
		{name: "no kubeconfig", noCluster: true, wantStatus: check.StatusSkipped},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []string
			for _, n := range []int{1, 2, 300} {
				svcs, eps, tbl := churnCluster(n, tc.broken)
				cfg := Config{IPVS: ipvstest.NewFake(tbl), NodeName: node,
					ReadLink:  func(string) (kubeproxy.Link, error) { return tableLink(tbl), nil },
					Scheduler: func(context.Context) (string, string) { return "lc", kubeproxy.FromConfigz }}
				if !tc.noCluster {
					cfg.Cluster = fakeCluster{svcs: svcs, eps: eps}
				}
				c, err := NewChecker(cfg)
				if err != nil {
					t.Fatal(err)
				}
				res, err := c.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != tc.wantStatus {
					t.Fatalf("%d Services: %s/%s %s", n, res.Status, res.Reason, res.Message)
				}
				if sum := res.Findings[0].(Summary); sum.VirtualServers != 2*n {
					t.Errorf("%d Services: summary %+v, want %d virtual servers (diagnose and metrics count them)", n, sum, 2*n)
				}
				msgs = append(msgs, res.Reason+": "+res.Message)
			}
			for _, m := range msgs[1:] {
				if diff := cmp.Diff(msgs[0], m); diff != "" {
					t.Errorf("message changes with the Service count (-1 Service +more):\n%s", diff)
				}
			}
		})
	}
}

func tableLink(tbl ipvs.Table) kubeproxy.Link {
	l := kubeproxy.Link{Name: kubeproxy.DummyInterface, Exists: true}
	for _, e := range tbl {
		l.Addrs = append(l.Addrs, e.Virtual.Address)
	}
	return l
}

// TestSettleHoldsKubeProxyLag: a Service kube-proxy has not programmed yet
// is not reported until its virtual server stays missing for the grace
// period; one that appears in time is never reported.
func TestSettleHoldsKubeProxyLag(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	svcs, eps, tbl := churnCluster(3, false)
	lagging := ipvstest.NewFake(tbl[:4]) // lb-2's two virtual servers are not programmed yet
	c, err := NewChecker(Config{IPVS: lagging, NodeName: node, Cluster: fakeCluster{svcs: svcs, eps: eps},
		ReadLink:  func(string) (kubeproxy.Link, error) { return tableLink(tbl), nil },
		Scheduler: func(context.Context) (string, string) { return "lc", kubeproxy.FromConfigz },
		Settle:    &check.Settler{Grace: 30 * time.Second, Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance time.Duration
		program bool
		want    string
	}{
		{0, false, ReasonOK},
		{20 * time.Second, false, ReasonOK},
		{10 * time.Second, false, ReasonVirtualServerMissing},
		{time.Second, true, ReasonOK},
		{time.Hour, true, ReasonOK},
	}
	for i, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		if st.program {
			lagging.SetTable(tbl)
		}
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason != st.want {
			t.Errorf("step %d: %s/%s %s, want %s", i, res.Status, res.Reason, res.Message, st.want)
		}
	}
}

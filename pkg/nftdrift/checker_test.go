// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// TestCheckerGhostsAreAdvisories: ghosts are findings that publish an
// advisory and leave the check ok; with a problem next to them, the problem
// alone is the reason and the message.
func TestCheckerGhostsAreAdvisories(t *testing.T) {
	services := []*corev1.Service{svc("web", "10.96.0.10", corev1.ServiceTypeClusterIP, 0, ""), svc("lb", "10.96.0.11", corev1.ServiceTypeLoadBalancer, 30080, "192.0.2.10")}
	ghost := func(t *Table) {
		t.ServiceIPs[ServiceKey{netip.MustParseAddr("10.96.0.99"), "tcp", 80}] = "service-ZZZZZZZZ-default/gone/tcp/http"
		t.Rules["service-ZZZZZZZZ-default/gone/tcp/http"] = 1
	}
	tests := []struct {
		name       string
		edit       func(t *Table)
		status     check.Status
		reason     string
		advisories int
	}{
		{name: "clean", edit: func(*Table) {}, status: check.StatusOK, reason: ReasonOK},
		{name: "ghosts only", edit: ghost, status: check.StatusOK, reason: ReasonOK, advisories: 2},
		{name: "ghosts and a missing element", edit: func(t *Table) {
			ghost(t)
			delete(t.ServiceIPs, ServiceKey{netip.MustParseAddr("10.96.0.10"), "tcp", 80})
		}, status: check.StatusProblem, reason: ReasonServiceIPMissing, advisories: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := goodTable()
			tc.edit(&tbl)
			c, err := NewChecker(Config{
				Read:      func() ([]Table, error) { return []Table{tbl}, nil },
				Mode:      func(context.Context) (string, error) { return kubeproxy.ModeNFTables, nil },
				Services:  func(context.Context) ([]*corev1.Service, error) { return services, nil },
				Endpoints: fakeEndpoints{},
				NodeName:  "n1",
			})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.status || r.Reason != tc.reason {
				t.Fatalf("%s/%s %q, want %s/%s", r.Status, r.Reason, r.Message, tc.status, tc.reason)
			}
			advisories := 0
			for _, f := range r.Findings {
				if a := f.State().Advisory; a != nil {
					advisories++
					if a.Check != check.NameNFTablesDataplane || a.Advisory != AdvisoryGhostState || a.Severity != "info" {
						t.Errorf("advisory %+v", a)
					}
				}
			}
			if advisories != tc.advisories {
				t.Errorf("%d advisories, want %d", advisories, tc.advisories)
			}
			if strings.Contains(r.Message, "no Service") {
				t.Errorf("the message names a ghost: %q", r.Message)
			}
		})
	}
}

// fakeEndpoints answers the EndpointSlices of web and lb.
type fakeEndpoints struct{}

func (fakeEndpoints) All(context.Context) (ipvsdrift.ServiceEndpoints, time.Time, error) {
	return ipvsdrift.Summarize([]*discoveryv1.EndpointSlice{eps("web", "10.244.1.5", "10.244.1.6"), eps("lb", "10.244.1.7")}), time.Time{}, nil
}

func (f fakeEndpoints) Of(ctx context.Context, _ []string) (ipvsdrift.ServiceEndpoints, error) {
	all, _, err := f.All(ctx)
	return all, err
}

// TestCheckerBlackHole: a black hole is a problem of its own reason, whose
// message and remediation send the operator to MetalLB, not to kube-proxy.
func TestCheckerBlackHole(t *testing.T) {
	lb := svc("lb", "10.96.0.11", corev1.ServiceTypeLoadBalancer, 30080, "192.0.2.10")
	lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	services := []*corev1.Service{svc("web", "10.96.0.10", corev1.ServiceTypeClusterIP, 0, ""), lb}
	tbl := goodTable()
	tbl.NoEndpoint[ServiceKey{netip.MustParseAddr("192.0.2.10"), "tcp", 80}] = "drop"
	for _, announced := range []bool{true, false} {
		c, err := NewChecker(Config{
			Read:      func() ([]Table, error) { return []Table{tbl}, nil },
			Mode:      func(context.Context) (string, error) { return kubeproxy.ModeNFTables, nil },
			Services:  func(context.Context) ([]*corev1.Service, error) { return services, nil },
			Endpoints: fakeEndpoints{}, // lb's endpoint is on n2
			NodeName:  "n1",
			Announced: func(context.Context) (map[netip.Addr]bool, error) {
				return map[netip.Addr]bool{netip.MustParseAddr("192.0.2.10"): announced}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !announced {
			if r.Status != check.StatusOK {
				t.Errorf("announced by another node: %s/%s %q", r.Status, r.Reason, r.Message)
			}
			continue
		}
		if r.Status != check.StatusProblem || r.Reason != ReasonBlackHole || !strings.Contains(r.Message, "black hole") ||
			strings.Contains(r.Message, "restart kube-proxy") || len(r.Remediation) != 1 || !strings.Contains(strings.Join(r.Remediation[0], " "), "MetalLB") {
			t.Errorf("%s/%s %q %v", r.Status, r.Reason, r.Message, r.Remediation)
		}
	}
}

// staleEndpoints is an agent's full read taken before web's pods moved:
// All still says 10.244.1.5 and .6; a read of web now says what of says.
type staleEndpoints struct {
	of   []string
	reqs *[]string
}

func (staleEndpoints) All(ctx context.Context) (ipvsdrift.ServiceEndpoints, time.Time, error) {
	return fakeEndpoints{}.All(ctx)
}

func (s staleEndpoints) Of(_ context.Context, names []string) (ipvsdrift.ServiceEndpoints, error) {
	*s.reqs = append(*s.reqs, names...)
	return ipvsdrift.Summarize([]*discoveryv1.EndpointSlice{eps("web", s.of...)}), nil
}

// TestCheckerConfirmsWithAFreshRead: in the agent (a settle grace) a
// finding that rests on the full read of EndpointSlices is reported only
// when a read of its Service now confirms it, as ipvs-dataplane does.
func TestCheckerConfirmsWithAFreshRead(t *testing.T) {
	services := []*corev1.Service{svc("web", "10.96.0.10", corev1.ServiceTypeClusterIP, 0, ""), svc("lb", "10.96.0.11", corev1.ServiceTypeLoadBalancer, 30080, "192.0.2.10")}
	// kube-proxy programmed web's new pods, 10.244.1.8 and .9.
	tbl := goodTable()
	for c := range tbl.DNAT {
		if strings.Contains(c, "/web/") {
			tbl.DNAT[c] = []netip.AddrPort{netip.MustParseAddrPort("10.244.1.8:8080"), netip.MustParseAddrPort("10.244.1.9:8080")}
		}
	}
	tests := []struct {
		name   string
		now    []string
		status check.Status
	}{
		{name: "the pods moved since the full read", now: []string{"10.244.1.8", "10.244.1.9"}, status: check.StatusOK},
		{name: "kube-proxy really is wrong", now: []string{"10.244.1.5", "10.244.1.6"}, status: check.StatusProblem},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var reqs []string
			c, err := NewChecker(Config{
				Read:      func() ([]Table, error) { return []Table{tbl}, nil },
				Mode:      func(context.Context) (string, error) { return kubeproxy.ModeNFTables, nil },
				Services:  func(context.Context) ([]*corev1.Service, error) { return services, nil },
				Endpoints: staleEndpoints{of: tc.now, reqs: &reqs},
				NodeName:  "n1",
				Settle:    &check.Settler{},
			})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.status || len(reqs) != 1 || reqs[0] != "default/web" {
				t.Fatalf("%s/%s %q after reads of %v; want %s after one read of default/web", r.Status, r.Reason, r.Message, reqs, tc.status)
			}
		})
	}
}

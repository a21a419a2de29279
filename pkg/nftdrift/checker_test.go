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

// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs/ipvstest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// fakeEndpoints serves a full read and the re-reads of named Services from
// what the test sets, counting the calls.
type fakeEndpoints struct {
	all, now []*discoveryv1.EndpointSlice
	allAt    time.Time
	of       [][]string
}

func (f *fakeEndpoints) All(context.Context) (ServiceEndpoints, time.Time, error) {
	return Summarize(f.all), f.allAt, nil
}

func (f *fakeEndpoints) Of(_ context.Context, names []string) (ServiceEndpoints, error) {
	f.of = append(f.of, names)
	out := ServiceEndpoints{}
	for _, es := range f.now {
		if slices.Contains(names, es.Namespace+"/"+es.Labels[discoveryv1.LabelServiceName]) {
			out.Add(es)
		}
	}
	for _, n := range names {
		out.Set(n)
	}
	return out, nil
}

type step struct {
	name      string
	advance   time.Duration
	table     ipvs.Table
	fullRead  bool                         // the full read is redone (new read time) with the current endpoints
	created   []*discoveryv1.EndpointSlice // endpoints set after the full read
	endpoints []*discoveryv1.EndpointSlice
	wantStat  check.Status
	wantRsn   string
	wantKinds []string
	wantOf    int // re-reads so far
}

func TestCheckerSettlesAndConfirms(t *testing.T) {
	dns := svc("dns", "10.96.0.10")
	two := []*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP, ep{addr: "10.244.0.2", ready: true}, ep{addr: "10.244.0.3", ready: true})}
	moved := []*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP, ep{addr: "10.244.0.2", ready: true}, ep{addr: "10.244.0.4", ready: true})}
	healthy := ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.0.3:53", 1, 0))}
	rolled := ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.0.4:53", 1, 0))}
	staleT := ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.0.3:53", 1, 0), rs("10.244.9.9:53", 1, 0))}
	zeroT := ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0), rs("10.244.0.3:53", 1, 0), rs("10.244.0.7:53", 0, 0))}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "a real server added by hand: held for the grace, confirmed by one re-read, re-read every 5 minutes",
			steps: []step{
				{name: "healthy", table: healthy, endpoints: two, fullRead: true, wantStat: check.StatusOK, wantRsn: ReasonOK},
				{name: "new: held back", table: staleT, wantStat: check.StatusOK},
				{name: "settled: confirmed", advance: 31 * time.Second, table: staleT, wantStat: check.StatusProblem, wantRsn: ReasonStaleRealServers, wantKinds: []string{KindStaleRealServer}, wantOf: 1},
				{name: "still: no re-read", advance: time.Minute, table: staleT, wantStat: check.StatusProblem, wantKinds: []string{KindStaleRealServer}, wantOf: 1},
				{name: "5 minutes on: re-read", advance: 4 * time.Minute, table: staleT, wantStat: check.StatusProblem, wantKinds: []string{KindStaleRealServer}, wantOf: 2},
				{name: "removed: ok at once", advance: time.Second, table: healthy, wantStat: check.StatusOK, wantOf: 2},
			},
		},
		{
			name: "pods rolled since the full read: the re-read clears it, nothing reported, no further re-read",
			steps: []step{
				{name: "healthy", table: healthy, endpoints: two, fullRead: true, wantStat: check.StatusOK},
				{name: "rolled, kube-proxy followed", table: rolled, endpoints: moved, wantStat: check.StatusOK},
				{name: "settled, re-read clears it", advance: 31 * time.Second, table: rolled, wantStat: check.StatusOK, wantOf: 1},
				{name: "next run reads nothing", advance: 31 * time.Second, table: rolled, wantStat: check.StatusOK, wantOf: 1},
			},
		},
		{
			name: "a Service created since the full read is read once, then judged",
			steps: []step{
				{name: "full read before it: read once", table: staleT, fullRead: true, created: two, wantStat: check.StatusOK, wantOf: 1},
				{name: "next run: no read", advance: 10 * time.Second, table: staleT, wantStat: check.StatusOK, wantOf: 1},
				{name: "settled: confirmed", advance: 21 * time.Second, table: staleT, wantStat: check.StatusProblem, wantKinds: []string{KindStaleRealServer}, wantOf: 2},
			},
		},
		{
			name: "a UDP real server left at weight 0: advisory after the window, never a problem",
			steps: []step{
				{name: "weight 0 appears", table: zeroT, endpoints: two, fullRead: true, wantStat: check.StatusOK},
				{name: "inside the window", advance: 2 * time.Minute, table: zeroT, wantStat: check.StatusOK},
				{name: "past the window: settles like any finding", advance: time.Minute, table: zeroT, wantStat: check.StatusOK},
				{name: "reported, confirmed by a re-read", advance: 31 * time.Second, table: zeroT, wantStat: check.StatusOK, wantKinds: []string{KindWeightZeroLeftover}, wantOf: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			fake := ipvstest.NewFake(nil)
			eps := &fakeEndpoints{}
			// One Settler for this check and another (the ipvs check), as
			// checkset builds them.
			shared := &check.Settler{Grace: 30 * time.Second, Clock: clk}
			c, err := NewChecker(Config{
				IPVS: fake,
				ReadLink: func(string) (kubeproxy.Link, error) {
					return kubeproxy.Link{Exists: true, Addrs: addrs("10.96.0.10")}, nil
				},
				Services:  func(context.Context) ([]*corev1.Service, error) { return []*corev1.Service{dns}, nil },
				Endpoints: eps,
				Settle:    shared,
				Clock:     clk,
			})
			if err != nil {
				t.Fatal(err)
			}
			var okMsg string
			for _, s := range tt.steps {
				clk.Step(s.advance)
				fake.SetTable(s.table)
				if s.endpoints != nil {
					eps.now = s.endpoints
				}
				if s.fullRead {
					eps.all, eps.allAt = eps.now, clk.Now()
				}
				if s.created != nil {
					eps.now = s.created
				}
				res, err := c.Run(context.Background())
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				shared.Settled([]string{"the ipvs check's own finding"})
				var kinds []string
				for _, f := range res.Findings[1:] {
					kinds = append(kinds, f.(Finding).Kind)
				}
				if res.Status != s.wantStat || (s.wantRsn != "" && res.Reason != s.wantRsn) || !slices.Equal(kinds, s.wantKinds) || len(eps.of) != s.wantOf {
					t.Errorf("%s: got %s/%s %v, %d re-reads; want %s/%s %v, %d re-reads (%s)", s.name, res.Status, res.Reason, kinds, len(eps.of), s.wantStat, s.wantRsn, s.wantKinds, s.wantOf, res.Message)
				}
				if res.Status == check.StatusOK {
					if okMsg != "" && res.Message != okMsg {
						t.Errorf("%s: the ok message changed with the findings: %q, was %q", s.name, res.Message, okMsg)
					}
					okMsg = res.Message
				}
			}
		})
	}
}

func TestCheckerSkipsAndReadsConnections(t *testing.T) {
	dir := t.TempDir()
	conn := filepath.Join(dir, "ip_vs_conn")
	if err := os.WriteFile(conn, []byte("Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n"+
		"UDP 0A000001 C350 0A60000A 0035 0AF40063 0035 UDP         00:58\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dns := svc("dns", "10.96.0.10")
	link := func(string) (kubeproxy.Link, error) {
		return kubeproxy.Link{Exists: true, Addrs: addrs("10.96.0.10")}, nil
	}
	eps := &fakeEndpoints{all: []*discoveryv1.EndpointSlice{slice("dns", 53, corev1.ProtocolUDP, ep{addr: "10.244.0.2", ready: true})}}
	table := ipvs.Table{vs("10.96.0.10", ipvs.UDP, 53, rs("10.244.0.2:53", 1, 0))}
	tests := []struct {
		name     string
		cfg      Config
		wantStat check.Status
		wantRsn  string
		wantLine string
	}{
		{name: "no kubeconfig", cfg: Config{IPVS: ipvstest.NewFake(table), ReadLink: link}, wantStat: check.StatusSkipped, wantRsn: ReasonNoKubeconfig},
		{
			name: "one-shot: a UDP connection entry to a gone backend",
			cfg: Config{IPVS: ipvstest.NewFake(table), ReadLink: link, ConnPath: conn, Endpoints: eps,
				Services: func(context.Context) ([]*corev1.Service, error) { return []*corev1.Service{dns}, nil }},
			wantStat: check.StatusOK, wantRsn: ReasonOK,
			wantLine: "1 connection entries of 10.96.0.10:53/UDP of default/dns still go to 10.244.0.99:53, no endpoint any more",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.wantStat || res.Reason != tt.wantRsn {
				t.Fatalf("got %s/%s (%s), want %s/%s", res.Status, res.Reason, res.Message, tt.wantStat, tt.wantRsn)
			}
			var lines []string
			for _, f := range res.Findings {
				lines = append(lines, f.String())
			}
			if tt.wantLine != "" && !slices.Contains(lines, tt.wantLine) {
				t.Errorf("findings %q lack %q", strings.Join(lines, " | "), tt.wantLine)
			}
			if tt.wantLine != "" {
				st := res.Findings[0].State().IPVSDrift
				if st == nil || st.GoneBackendConnections[check.ServiceProtocol{Service: "default/dns", Protocol: "UDP"}] != 1 {
					t.Errorf("state %+v: want 1 gone UDP connection of default/dns", st)
				}
			}
		})
	}
}

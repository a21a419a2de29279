// SPDX-License-Identifier: Apache-2.0

package checkset

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

func fakeDynamic() *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{clusterview.ServiceL2StatusGVR: "ServiceL2StatusList"})
}

// fakeMetadata serves Node metadata (none) for the one-shot view.
func fakeMetadata() *metadatafake.FakeMetadataClient {
	scheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(scheme)
	return metadatafake.NewSimpleMetadataClient(scheme)
}

// lists returns the resources cs was asked to list.
func lists(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" {
			out = append(out, a.GetResource().Resource)
		}
	}
	return out
}

func TestBuild(t *testing.T) {
	failServices := func(cs *fake.Clientset) {
		cs.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("the server is on fire")
		})
	}
	tests := []struct {
		name     string
		probeIPs []string
		cluster  func(cs *fake.Clientset) *Cluster
		prepare  func(cs *fake.Clientset)
		// wantLists are the resources listed while building.
		wantLists []string
		// wantARP is how the arp check's run ends: its reason, or the error's text.
		wantARP string
	}{
		{
			name:    "node-local: nothing to probe",
			wantARP: "NoTargets",
		},
		{
			name:     "probe IPs are parsed",
			probeIPs: []string{"not-an-ip"},
			wantARP:  "error: ",
		},
		{
			name: "diagnose with a cluster lists it once for the arp check",
			cluster: func(cs *fake.Clientset) *Cluster {
				return &Cluster{Client: kubetest.FromClientset(cs), Dynamic: fakeDynamic(), Metadata: fakeMetadata()}
			},
			wantLists: []string{"nodes", "services"},
			wantARP:   "NoTargets",
		},
		{
			name:     "probe IPs: the cluster is not listed for the arp check",
			probeIPs: []string{"192.0.2.1"},
			cluster: func(cs *fake.Clientset) *Cluster {
				return &Cluster{Client: kubetest.FromClientset(cs), Dynamic: fakeDynamic(), Metadata: fakeMetadata()}
			},
		},
		{
			name: "a cluster that cannot be listed fails only the arp check",
			cluster: func(cs *fake.Clientset) *Cluster {
				return &Cluster{Client: kubetest.FromClientset(cs), Dynamic: fakeDynamic(), Metadata: fakeMetadata(), ListTimeout: 200 * time.Millisecond}
			},
			prepare:   failServices,
			wantLists: []string{"nodes", "services"},
			wantARP:   "reading LoadBalancer IPs from the cluster",
		},
		{
			name: "the agent's view is never listed by Build",
			cluster: func(cs *fake.Clientset) *Cluster {
				return &Cluster{Client: kubetest.FromClientset(cs), View: clusterview.New("node-a", kubetest.FromClientset(cs), fakeDynamic(), fakeMetadata()), ShardK: 3}
			},
			prepare: failServices,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tt.prepare != nil {
				tt.prepare(cs)
			}
			cfg := Config{Root: hostfs.New(t.TempDir()), NodeName: "node-a", ProbeIPs: tt.probeIPs}
			if tt.cluster != nil {
				cfg.Cluster = tt.cluster(cs)
			}
			checkers, err := Build(context.Background(), cfg)
			if strings.HasPrefix(tt.wantARP, "error: ") {
				if err == nil {
					t.Fatal("Build accepted an invalid probe IP")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The report order of these checks; a check added later may
			// go anywhere, but no name may appear twice.
			known := []string{check.NameModules, check.NameKubeProxy, check.NameIPVS, check.NameARPSysctls, check.NameARP}
			var names []string
			var arp check.Checker
			seen := map[string]bool{}
			for _, c := range checkers {
				if seen[c.Name()] {
					t.Errorf("two checks named %q", c.Name())
				}
				seen[c.Name()] = true
				if slices.Contains(known, c.Name()) {
					names = append(names, c.Name())
				}
				if c.Name() == check.NameARP {
					arp = c
				}
			}
			if diff := cmp.Diff(known, names); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
			got := uniqueSorted(lists(cs))
			if diff := cmp.Diff(tt.wantLists, got); diff != "" {
				t.Errorf("resources listed by Build (-want +got):\n%s", diff)
			}
			if tt.wantARP == "" {
				return
			}
			res, err := arp.Run(context.Background())
			gotARP := res.Reason
			if err != nil {
				gotARP = err.Error()
			}
			if !strings.Contains(gotARP, tt.wantARP) {
				t.Errorf("arp check: got %q, want %q", gotARP, tt.wantARP)
			}
		})
	}
}

func uniqueSorted(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// TestBuildMigrationChecks: ipvs-leftovers is always built; the
// nftables-readiness report only for --target-mode nftables (run every
// time) or with a readiness interval (the agent: run at most that often).
func TestBuildMigrationChecks(t *testing.T) {
	tests := []struct {
		name          string
		targetMode    string
		interval      time.Duration
		wantReadiness bool
		wantEvery     bool
	}{
		{name: "plain diagnose"},
		{name: "diagnose --target-mode nftables", targetMode: TargetModeNFTables, wantReadiness: true},
		{name: "agent", interval: time.Hour, wantReadiness: true, wantEvery: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkers, err := Build(context.Background(), Config{Root: hostfs.New(t.TempDir()), NodeName: "n1",
				KubeProxyMetricsAddress: "127.0.0.1:1", TargetMode: tt.targetMode, ReadinessInterval: tt.interval})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var readiness check.Checker
			for _, c := range checkers {
				names = append(names, c.Name())
				if c.Name() == check.NameNFTablesReadiness {
					readiness = c
				}
			}
			if !slices.Contains(names, check.NameIPVSLeftovers) {
				t.Errorf("no %s check in %q", check.NameIPVSLeftovers, names)
			}
			// The nftables-prerequisites check runs in every command, on
			// kube-proxy's mode: here its metrics port refuses connections.
			if i := slices.Index(names, check.NameNFTablesPrerequisites); i < 0 {
				t.Errorf("no %s check in %q", check.NameNFTablesPrerequisites, names)
			} else if res, err := checkers[i].Run(context.Background()); err != nil || res.Status != check.StatusSkipped || res.Reason != kubeproxy.ReasonUnreachable {
				t.Errorf("%s with kube-proxy unreachable: %v %s %s: %s", check.NameNFTablesPrerequisites, err, res.Status, res.Reason, res.Message)
			}
			if (readiness != nil) != tt.wantReadiness {
				t.Fatalf("readiness built = %v, want %v (%q)", readiness != nil, tt.wantReadiness, names)
			}
			if _, every := readiness.(*check.Every); readiness != nil && every != tt.wantEvery {
				t.Errorf("readiness throttled = %v, want %v", every, tt.wantEvery)
			}
		})
	}
	if err := ValidateTargetMode("iptables"); err == nil {
		t.Error("--target-mode iptables accepted")
	}
	if err := ValidateTargetMode(""); err != nil {
		t.Error(err)
	}
}

// countingTable counts reads and fails the first fail of them.
type countingTable struct {
	reads, fail int
}

func (c *countingTable) Table(context.Context) (ipvs.Table, error) {
	c.reads++
	if c.reads <= c.fail {
		return nil, ipvs.ErrModuleNotLoaded
	}
	return ipvs.Table{{Virtual: ipvs.VirtualServer{Port: uint16(c.reads)}}}, nil
}

// TestOneShotTable: the checks of one diagnose run share the first successful
// read of the IPVS table; a failed read is read again.
func TestOneShotTable(t *testing.T) {
	for _, tt := range []struct {
		name      string
		fail      int
		wantReads int
		wantPort  uint16
	}{
		{name: "one dump for every check", wantReads: 1, wantPort: 1},
		{name: "a failed read is not kept", fail: 1, wantReads: 2, wantPort: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &countingTable{fail: tt.fail}
			p := ipvs.NewRecent(c).Within(wholeRun)
			var last ipvs.Table
			for range 3 {
				tab, err := p.Table(context.Background())
				if err == nil {
					last = tab
				}
			}
			if c.reads != tt.wantReads || len(last) != 1 || last[0].Virtual.Port != tt.wantPort {
				t.Errorf("reads %d, table %v", c.reads, last)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// iptablesFamily is iptables-nft's tables with kube-proxy's chains.
func iptablesFamily(fam string) IPTablesFamily {
	f := IPTablesFamily{Family: fam, Chains: map[string]map[string]bool{}}
	for _, c := range IPTablesChains {
		if f.Chains[c.Table] == nil {
			f.Chains[c.Table] = map[string]bool{}
		}
		f.Chains[c.Table][c.Chain] = true
	}
	return f
}

func TestIPTablesMode(t *testing.T) {
	v4 := []*corev1.Service{svc("web", "10.96.0.10", corev1.ServiceTypeClusterIP, 0, "")}
	dual := append(v4, svc("web6", "fd00::10", corev1.ServiceTypeClusterIP, 0, ""))
	tests := []struct {
		name    string
		edit    func(ip, ip6 *IPTablesFamily)
		svcs    []*corev1.Service
		legacy  bool
		reason  string
		missing []string // "family table chain"
	}{
		{name: "present", edit: func(ip, ip6 *IPTablesFamily) {}, svcs: dual, reason: ReasonIPTablesOK},
		{name: "flushed ruleset", edit: func(ip, ip6 *IPTablesFamily) { ip.Chains = nil }, svcs: v4, reason: ReasonIPTablesChainsMissing,
			missing: []string{"ip mangle KUBE-PROXY-CANARY", "ip filter KUBE-PROXY-CANARY", "ip nat KUBE-PROXY-CANARY", "ip nat KUBE-SERVICES"}},
		{name: "ip6 not judged in a single-stack cluster", edit: func(ip, ip6 *IPTablesFamily) { ip6.Chains = nil }, svcs: v4, reason: ReasonIPTablesOK},
		{name: "ip6 judged in a dual-stack cluster", edit: func(ip, ip6 *IPTablesFamily) { delete(ip6.Chains["nat"], ChainKubeServices) }, svcs: dual,
			reason: ReasonIPTablesChainsMissing, missing: []string{"ip6 nat KUBE-SERVICES"}},
		{name: "legacy backend", edit: func(ip, ip6 *IPTablesFamily) { ip.Chains = nil }, svcs: v4, legacy: true, reason: ReasonIPTablesLegacy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ip, ip6 := iptablesFamily("ip"), iptablesFamily("ip6")
			tc.edit(&ip, &ip6)
			c, err := NewChecker(Config{
				Read:           func() ([]Table, error) { t.Fatal("the nftables table read in iptables mode"); return nil, nil },
				ReadIPTables:   func() ([]IPTablesFamily, error) { return []IPTablesFamily{ip, ip6}, nil },
				LegacyIPTables: func() bool { return tc.legacy },
				Mode:           func(context.Context) (string, error) { return kubeproxy.ModeIPTables, nil },
				Services:       func(context.Context) ([]*corev1.Service, error) { return tc.svcs, nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.missing) > 0 && !strings.Contains(r.Message, ChainKubeServices) && strings.Contains(strings.Join(tc.missing, ","), ChainKubeServices) {
				t.Errorf("the message does not name %s: %q", ChainKubeServices, r.Message)
			}
			if r.Reason != tc.reason {
				t.Fatalf("%s/%s %q, want %s", r.Status, r.Reason, r.Message, tc.reason)
			}
			if want := map[string]check.Status{ReasonIPTablesOK: check.StatusOK, ReasonIPTablesChainsMissing: check.StatusProblem, ReasonIPTablesLegacy: check.StatusSkipped}[tc.reason]; r.Status != want {
				t.Errorf("status %s, want %s", r.Status, want)
			}
			var got []string
			for _, f := range r.Findings {
				x := f.(Finding)
				got = append(got, x.Family+" "+x.Element+" "+x.Chain)
				if !x.Problem || !strings.Contains(x.String(), x.Chain) {
					t.Errorf("finding %+v: %s", x, x)
				}
			}
			if slices.Sort(got); !slices.Equal(got, sortedCopy(tc.missing)) {
				t.Errorf("missing %v, want %v", got, tc.missing)
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

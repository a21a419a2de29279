// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

func TestConditions(t *testing.T) {
	all := []string{check.NameModules, check.NameKubeProxy, check.NameKubeProxySync, check.NameIPVS, check.NameARPSysctls, check.NameARP}
	tests := []struct {
		name    string
		results []check.Result
		enabled []string
		want    []Condition
	}{
		{
			// The migration advisories feed no condition, whatever their
			// status: a node not ready for nftables, or with IPVS leftovers,
			// is no node with a problem.
			name: "advisory checks move no condition",
			results: []check.Result{
				{Name: check.NameModules, Status: check.StatusOK, Reason: "ModulesLoadedAndDeclared"},
				{Name: check.NameNFTablesReadiness, Status: check.StatusProblem, Reason: "NotReadyForNftables", Message: "kernel 5.10 is older than 5.13"},
				{Name: check.NameIPVSLeftovers, Status: check.StatusOK, Reason: "IPVSLeftovers", Message: "kube-ipvs0 left behind"},
			},
			enabled: []string{check.NameModules, check.NameNFTablesReadiness, check.NameIPVSLeftovers},
			want:    []Condition{{Type: IPVSModulesMissing, Status: StatusFalse, Reason: "ModulesLoadedAndDeclared"}},
		},
		{
			name:    "nothing run yet: every enabled type Unknown",
			enabled: all,
			want: []Condition{
				{Type: IPVSModulesMissing, Status: StatusUnknown, Reason: ReasonNotYetChecked, Message: "ipvs-guard has not finished checking modules yet."},
				{Type: KubeProxyIPVSDegraded, Status: StatusUnknown, Reason: ReasonNotYetChecked, Message: "ipvs-guard has not finished checking kube-proxy and ipvs yet."},
				{Type: KubeProxyDataplaneDegraded, Status: StatusUnknown, Reason: ReasonNotYetChecked, Message: "ipvs-guard has not finished checking kube-proxy-sync yet."},
				{Type: StrictARPDisabled, Status: StatusUnknown, Reason: ReasonNotYetChecked, Message: "ipvs-guard has not finished checking arp-sysctls yet."},
				{Type: LoadBalancerARPFailing, Status: StatusUnknown, Reason: ReasonNotYetChecked, Message: "ipvs-guard has not finished checking arp yet."},
			},
		},
		{
			name:    "statuses map to True/False/Unknown",
			enabled: []string{check.NameModules, check.NameARPSysctls, check.NameARP},
			results: []check.Result{
				{Name: check.NameModules, Status: check.StatusProblem, Reason: "ModulesNotLoaded", Message: "ip_vs_lc is not loaded."},
				{Name: check.NameARPSysctls, Status: check.StatusError, Reason: "CheckFailed", Message: "reading sysctl: EPERM."},
				{Name: check.NameARP, Status: check.StatusSkipped, Reason: "NoLoadBalancerIPs", Message: "no LoadBalancer IPs to probe."},
			},
			want: []Condition{
				{Type: IPVSModulesMissing, Status: StatusTrue, Reason: "ModulesNotLoaded", Message: "ip_vs_lc is not loaded."},
				{Type: StrictARPDisabled, Status: StatusUnknown, Reason: "CheckFailed", Message: "reading sysctl: EPERM."},
				{Type: LoadBalancerARPFailing, Status: StatusFalse, Reason: "NoLoadBalancerIPs", Message: "Nothing to check: no LoadBalancer IPs to probe."},
			},
		},
		{
			name:    "nothing run yet: the message names the enabled checks only",
			enabled: []string{check.NameKubeProxy, check.NameIPVS, check.NameIPVSDataplane},
			want: []Condition{
				{Type: KubeProxyIPVSDegraded, Status: StatusUnknown, Reason: ReasonNotYetChecked, Message: "ipvs-guard has not finished checking kube-proxy and ipvs yet."},
				{Type: KubeProxyDataplaneDegraded, Status: StatusUnknown, Reason: ReasonNotYetChecked, Message: "ipvs-guard has not finished checking ipvs-dataplane yet."},
			},
		},
		{
			name:    "nftables mode: the IPVS prerequisites do not apply, kube-proxy's data plane does",
			enabled: []string{check.NameKubeProxy, check.NameKubeProxySync, check.NameIPVS, check.NameIPVSDataplane, check.NameNFTablesDataplane},
			results: []check.Result{
				{Name: check.NameKubeProxy, Status: check.StatusSkipped, Reason: check.ReasonIPVSNotInUse, Message: "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
				{Name: check.NameIPVS, Status: check.StatusSkipped, Reason: check.ReasonIPVSNotInUse, Message: "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
				{Name: check.NameIPVSDataplane, Status: check.StatusSkipped, Reason: check.ReasonIPVSNotInUse, Message: "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
				{Name: check.NameKubeProxySync, Status: check.StatusOK, Reason: "KubeProxySyncing", Message: "kube-proxy (nftables mode) syncs its rules within its health timeout of 1m0s"},
				{Name: check.NameNFTablesDataplane, Status: check.StatusProblem, Reason: "NFTablesTableMissing", Message: "kube-proxy's table ip kube-proxy is missing."},
			},
			want: []Condition{
				{Type: KubeProxyIPVSDegraded, Status: StatusFalse, Reason: check.ReasonIPVSNotInUse, Message: "Nothing to check: kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
				{Type: KubeProxyDataplaneDegraded, Status: StatusTrue, Reason: "NFTablesTableMissing", Message: "kube-proxy's table ip kube-proxy is missing."},
			},
		},
		{
			name:    "nftables mode: a blocked module kube-proxy's rules need makes the data plane degraded, after the table's own findings",
			enabled: []string{check.NameKubeProxySync, check.NameIPVSDataplane, check.NameNFTablesDataplane, check.NameNFTablesPrerequisites},
			results: []check.Result{
				{Name: check.NameIPVSDataplane, Status: check.StatusSkipped, Reason: check.ReasonIPVSNotInUse, Message: "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
				{Name: check.NameKubeProxySync, Status: check.StatusOK, Reason: "KubeProxySyncing", Message: "kube-proxy (nftables mode) syncs its rules within its health timeout of 1m0s"},
				{Name: check.NameNFTablesDataplane, Status: check.StatusOK, Reason: "NFTablesDataplaneMatchesCluster", Message: "kube-proxy's nftables table matches the cluster."},
				{Name: check.NameNFTablesPrerequisites, Status: check.StatusProblem, Reason: "NFTablesModuleBlocked", Message: `nft_numgen, which kube-proxy's nftables rules need, is blocked by "blacklist nft_numgen" in /etc/modprobe.d/x.conf: it is loaded now, but the kernel will not load it after the next boot.`},
			},
			want: []Condition{
				{Type: KubeProxyDataplaneDegraded, Status: StatusTrue, Reason: "NFTablesModuleBlocked", Message: `nft_numgen, which kube-proxy's nftables rules need, is blocked by "blacklist nft_numgen" in /etc/modprobe.d/x.conf: it is loaded now, but the kernel will not load it after the next boot.`},
			},
		},
		{
			name:    "IPVS mode: nftables-prerequisites skipped does not hide the IPVS data plane's verdict",
			enabled: []string{check.NameIPVSDataplane, check.NameNFTablesPrerequisites},
			results: []check.Result{
				{Name: check.NameIPVSDataplane, Status: check.StatusOK, Reason: "IPVSDataplaneMatchesCluster", Message: "the IPVS table matches the cluster."},
				{Name: check.NameNFTablesPrerequisites, Status: check.StatusSkipped, Reason: "NFTablesNotInUse", Message: "kube-proxy runs in ipvs mode: the nftables prerequisites do not apply"},
			},
			want: []Condition{
				{Type: KubeProxyDataplaneDegraded, Status: StatusFalse, Reason: "IPVSDataplaneMatchesCluster", Message: "the IPVS table matches the cluster."},
			},
		},
		{
			name:    "kube-proxy and ipvs combine, worst wins",
			enabled: []string{check.NameKubeProxy, check.NameIPVS},
			results: []check.Result{
				{Name: check.NameKubeProxy, Status: check.StatusOK, Reason: "IPVSMode", Message: "kube-proxy runs in ipvs mode."},
				{Name: check.NameIPVS, Status: check.StatusProblem, Reason: "VirtualServerMissing", Message: "10.0.0.1:80/TCP has no virtual server."},
			},
			want: []Condition{{Type: KubeProxyIPVSDegraded, Status: StatusTrue, Reason: "VirtualServerMissing", Message: "10.0.0.1:80/TCP has no virtual server."}},
		},
		{
			name:    "both problems: kube-proxy's reason, both messages",
			enabled: []string{check.NameKubeProxy, check.NameIPVS},
			results: []check.Result{
				{Name: check.NameIPVS, Status: check.StatusProblem, Reason: "VirtualServerMissing", Message: "b."},
				{Name: check.NameKubeProxy, Status: check.StatusProblem, Reason: "NotIPVSMode", Message: "a."},
			},
			want: []Condition{{Type: KubeProxyIPVSDegraded, Status: StatusTrue, Reason: "NotIPVSMode", Message: "a. b."}},
		},
		{
			name:    "kube-proxy and ipvs both not in use: one message, not twice",
			enabled: []string{check.NameKubeProxy, check.NameIPVS},
			results: []check.Result{
				{Name: check.NameKubeProxy, Status: check.StatusSkipped, Reason: check.ReasonIPVSNotInUse, Message: "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
				{Name: check.NameIPVS, Status: check.StatusSkipped, Reason: check.ReasonIPVSNotInUse, Message: "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
			},
			want: []Condition{{Type: KubeProxyIPVSDegraded, Status: StatusFalse, Reason: check.ReasonIPVSNotInUse, Message: "Nothing to check: kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"}},
		},
		{
			name:    "ok without reason gets the default",
			enabled: []string{check.NameModules},
			results: []check.Result{{Name: check.NameModules, Status: check.StatusOK}},
			want:    []Condition{{Type: IPVSModulesMissing, Status: StatusFalse, Reason: ReasonCheckPassed}},
		},
		{
			name:    "results of disabled checks are ignored",
			enabled: nil,
			results: []check.Result{{Name: check.NameModules, Status: check.StatusProblem}},
			want:    nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Conditions(tt.results, tt.enabled)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Conditions() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConditionsTruncatesMessage(t *testing.T) {
	long := strings.Repeat("é", 2000)
	got := Conditions([]check.Result{{Name: check.NameModules, Status: check.StatusProblem, Message: long}}, []string{check.NameModules})
	if n := len(got[0].Message); n > maxMessageLen {
		t.Errorf("message length %d, want at most %d", n, maxMessageLen)
	}
	if !strings.HasSuffix(got[0].Message, "…") || strings.ContainsRune(got[0].Message, '\uFFFD') {
		t.Errorf("message not cut cleanly: ...%q", got[0].Message[len(got[0].Message)-10:])
	}
}

// TestConditionsMessageOneLine: a condition message (and so its Event's
// note) is one line whatever outside text a check's message quotes, and
// stays within maxMessageLen bytes once escaped.
func TestConditionsMessageOneLine(t *testing.T) {
	tests := []string{
		"Stale declaration: x is declared in /etc/modules-load.d/a\nfix: rm -rf /.conf",
		"in /etc/modules-load.d/a\r\nfix: rm",
		"in /etc/modules-load.d/a\u2028fix: rm \u2029 \u0085 \x1b[2K \v\f",
		strings.Repeat("\n\u2028é", 1000),
	}
	for _, msg := range tests {
		got := Conditions([]check.Result{{Name: check.NameModules, Status: check.StatusProblem, Message: msg}}, []string{check.NameModules})
		m := got[0].Message
		if strings.ContainsAny(m, "\n\r\v\f\x1b\u2028\u2029\u0085") {
			t.Errorf("message %q is not one line", m)
		}
		if len(m) > maxMessageLen || !utf8.ValidString(m) || strings.ContainsRune(m, '\uFFFD') {
			t.Errorf("message of %d bytes not cut cleanly: %q", len(m), m)
		}
	}
}

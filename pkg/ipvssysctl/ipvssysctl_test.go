// SPDX-License-Identifier: Apache-2.0

package ipvssysctl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// fakeTimeouts is a TimeoutReader with fixed answers.
type fakeTimeouts struct {
	t   ipvs.Timeouts
	err error
}

func (f fakeTimeouts) Timeouts(context.Context) (ipvs.Timeouts, error) { return f.t, f.err }

// hostTree writes a host tree: files maps a path under root to its content.
func hostTree(t *testing.T, files map[string]string) hostfs.Root {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hostfs.New(dir)
}

// ipvsHost is a host with ip_vs loaded, the given kernel and sysctls
// (dotted name → value); kube-proxy's settings unless overridden.
func ipvsHost(t *testing.T, kernel string, over map[string]string) hostfs.Root {
	files := map[string]string{
		"proc/modules":                                   "ip_vs 180224 6 ip_vs_rr, Live 0x0000000000000000\n",
		"proc/sys/kernel/osrelease":                      kernel + "\n",
		"proc/sys/net/ipv4/vs/conn_reuse_mode":           "1\n",
		"proc/sys/net/ipv4/vs/expire_nodest_conn":        "1\n",
		"proc/sys/net/ipv4/vs/expire_quiescent_template": "1\n",
		"proc/sys/net/ipv4/vs/conntrack":                 "1\n",
		"proc/sys/net/ipv4/tcp_keepalive_time":           "7200\n",
	}
	for name, v := range over {
		p := "proc/sys/" + strings.ReplaceAll(name, ".", "/")
		if v == "" {
			delete(files, p)
			continue
		}
		files[p] = v + "\n"
	}
	return hostTree(t, files)
}

func TestIPVSSysctls(t *testing.T) {
	defaults := ipvs.Timeouts{TCP: 900 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}
	long := ipvs.Timeouts{TCP: 8000 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}
	tests := []struct {
		name         string
		kernel       string
		over         map[string]string
		timeouts     ipvs.TimeoutReader
		wantReason   string
		wantAdvisory map[string]string // advisory → severity
		wantMsg      []string
	}{
		{name: "6.1 as kube-proxy sets it, long TCP timeout", kernel: "6.1.0-56-amd64", timeouts: fakeTimeouts{t: long},
			wantReason: ReasonSysctlsOK, wantAdvisory: map[string]string{}, wantMsg: []string{"kernel 6.1.0", "outlasts TCP keepalive"}},
		{name: "6.1 with the defaults: TCP 900 s < keepalive 7200 s", kernel: "6.1.0-56-amd64", timeouts: fakeTimeouts{t: defaults},
			wantReason: ReasonSysctlAdvisories, wantAdvisory: map[string]string{AdvisoryTCPTimeoutBelowKeep: SeverityWarning}, wantMsg: []string{"ipvs.timeout.tcp=900"}},
		{name: "keepalive lowered below the TCP timeout", kernel: "6.1.0-56-amd64", over: map[string]string{SysctlTCPKeepaliveTime: "600"}, timeouts: fakeTimeouts{t: defaults},
			wantReason: ReasonSysctlsOK, wantAdvisory: map[string]string{}},
		{name: "5.4: conn_reuse_mode 1 delays", kernel: "5.4.0-150-generic", timeouts: fakeTimeouts{t: long},
			wantReason: ReasonSysctlAdvisories, wantAdvisory: map[string]string{AdvisoryConnReuseDelay: SeverityWarning}, wantMsg: []string{"conn_reuse_mode=1"}},
		{name: "5.4: conn_reuse_mode 0 as kube-proxy sets it", kernel: "5.4.0-150-generic", over: map[string]string{SysctlConnReuseMode: "0"}, timeouts: fakeTimeouts{t: long},
			wantReason: ReasonSysctlAdvisories, wantAdvisory: map[string]string{AdvisoryConnReuseStickyBackend: SeverityInfo}},
		{name: "6.1: conn_reuse_mode 0 is no longer needed", kernel: "6.1.0-56-amd64", over: map[string]string{SysctlConnReuseMode: "0"}, timeouts: fakeTimeouts{t: long},
			wantReason: ReasonSysctlAdvisories, wantAdvisory: map[string]string{AdvisoryConnReuseStickyBackend: SeverityInfo}},
		{name: "4.0: no conn_reuse_mode at all", kernel: "4.0.9", over: map[string]string{SysctlConnReuseMode: ""}, timeouts: fakeTimeouts{t: long},
			wantReason: ReasonSysctlsOK, wantAdvisory: map[string]string{}},
		{name: "everything reset", kernel: "6.12.48+deb13-amd64", over: map[string]string{SysctlExpireNodestConn: "0", SysctlExpireQuiescent: "0", SysctlVSConntrack: "0"}, timeouts: fakeTimeouts{t: long},
			wantReason: ReasonSysctlAdvisories, wantAdvisory: map[string]string{AdvisoryExpireNodestConnOff: SeverityWarning, AdvisoryExpireQuiescentOff: SeverityWarning, AdvisoryConntrackOff: SeverityWarning},
			wantMsg: []string{"expire_nodest_conn=0", "expire_quiescent_template=0", "net.ipv4.vs.conntrack=0"}},
		{name: "timeouts unreadable: said, sysctls still judged", kernel: "6.1.0-56-amd64", timeouts: fakeTimeouts{err: errors.New("netlink: EPERM")},
			wantReason: ReasonSysctlsOK, wantAdvisory: map[string]string{}, wantMsg: []string{"IPVS timeouts unknown: netlink: EPERM"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewChecker(Config{Root: ipvsHost(t, tc.kernel, tc.over), Timeouts: tc.timeouts})
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != check.StatusOK || res.Reason != tc.wantReason {
				t.Fatalf("got %s/%s (%s), want ok/%s", res.Status, res.Reason, res.Message, tc.wantReason)
			}
			got := map[string]string{}
			for _, f := range res.Findings {
				if a := f.State().Advisory; a != nil {
					got[a.Advisory] = a.Severity
					if f.(Finding).Why == "" {
						t.Errorf("advisory %s says no why", a.Advisory)
					}
				}
			}
			if len(got) != len(tc.wantAdvisory) {
				t.Errorf("advisories %v, want %v", got, tc.wantAdvisory)
			}
			for a, sev := range tc.wantAdvisory {
				if got[a] != sev {
					t.Errorf("advisory %s: severity %q, want %q (all: %v)", a, got[a], sev, got)
				}
			}
			for _, s := range tc.wantMsg {
				if !strings.Contains(res.Message, s) {
					t.Errorf("message %q lacks %q", res.Message, s)
				}
			}
		})
	}
}

func TestIPVSSysctlsNothingToLookAt(t *testing.T) {
	notLoaded := hostTree(t, map[string]string{"proc/modules": "dummy 16384 0 - Live 0x0\n", "proc/sys/kernel/osrelease": "6.1.0\n"})
	res, err := NewChecker(Config{Root: notLoaded}).Run(context.Background())
	if err != nil || res.Status != check.StatusSkipped || res.Reason != ReasonIPVSNotLoaded {
		t.Errorf("ip_vs not loaded: %+v, %v", res, err)
	}
	off := func(context.Context) check.IPVSUse {
		return check.IPVSUse{Applies: false, Mode: "nftables", Message: "nftables"}
	}
	res, err = NewChecker(Config{Root: notLoaded, IPVSUse: off}).Run(context.Background())
	if err != nil || res.Status != check.StatusSkipped || res.Reason != check.ReasonIPVSNotInUse {
		t.Errorf("IPVS not in use: %+v, %v", res, err)
	}
	bad := ipvsHost(t, "6.1.0", map[string]string{SysctlExpireNodestConn: "yes"})
	if _, err := NewChecker(Config{Root: bad}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "expire_nodest_conn") {
		t.Errorf("unparsable sysctl: err = %v, want one naming it", err)
	}
}

func TestParseKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want string
		err  bool
	}{
		{rel: "6.1.0-56-amd64", want: "6.1.0"}, {rel: "5.4.0-150-generic", want: "5.4.0"}, {rel: "4.18.0-553.el8_10.x86_64", want: "4.18.0"},
		{rel: "6.12.48+deb13-amd64", want: "6.12.48"}, {rel: "5.10.0-33-cloud-amd64", want: "5.10.0"}, {rel: "6.1.0-28-amd64", want: "6.1.0"}, {rel: "5.9", want: "5.9.0"}, {rel: "6", err: true}, {rel: "x.y", err: true},
	} {
		v, err := ParseKernelVersion(tc.rel)
		if (err != nil) != tc.err || (!tc.err && v.String() != tc.want) {
			t.Errorf("ParseKernelVersion(%q) = %v, %v; want %s (error %t)", tc.rel, v, err, tc.want, tc.err)
		}
	}
}

func TestConntrack(t *testing.T) {
	tests := []struct {
		name       string
		count, max string
		absent     bool
		wantStatus check.Status
		wantReason string
		wantAdv    bool
		// rke2 and kubeadm add the distribution's marker to the tree.
		rke2, kubeadm      bool
		wantFix, wantNoFix []string
	}{
		{name: "quiet", count: "1200", max: "262144", wantStatus: check.StatusOK, wantReason: ReasonConntrackOK},
		{name: "just below 90%", count: "899", max: "1000", wantStatus: check.StatusOK, wantReason: ReasonConntrackOK},
		{name: "nearly full", count: "950", max: "1000", wantStatus: check.StatusOK, wantReason: ReasonConntrackNearlyFull, wantAdv: true},
		{name: "full", count: "1000", max: "1000", wantStatus: check.StatusProblem, wantReason: ReasonConntrackFull, wantAdv: true},
		{name: "nf_conntrack not loaded", absent: true, wantStatus: check.StatusSkipped, wantReason: ReasonConntrackNotLoaded},
		// RKE2 runs kube-proxy with conntrack-max-per-core=0: the limit is
		// the OS's, kept by a sysctl.d file, not by kube-proxy's settings.
		{name: "full on RKE2: a sysctl.d file keeps the limit", count: "1000", max: "1000", rke2: true, wantStatus: check.StatusProblem, wantReason: ReasonConntrackFull, wantAdv: true,
			wantFix:   []string{"sysctl -w net.netfilter.nf_conntrack_max=2000", "conntrack-max-per-core=0", "echo 'net.netfilter.nf_conntrack_max = 2000' > /etc/sysctl.d/90-nf-conntrack.conf"},
			wantNoFix: []string{"conntrack.maxPerCore"}},
		{name: "nearly full on kubeadm: kube-proxy's settings keep it", count: "950", max: "1000", kubeadm: true, wantStatus: check.StatusOK, wantReason: ReasonConntrackNearlyFull, wantAdv: true,
			wantFix: []string{"conntrack.maxPerCore × CPUs", "a sysctl.d value is overwritten"}, wantNoFix: []string{"/etc/sysctl.d/90-nf-conntrack.conf"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"proc/sys/kernel/osrelease": "6.1.0\n"}
			if !tc.absent {
				files["proc/sys/net/netfilter/nf_conntrack_count"] = tc.count + "\n"
				files["proc/sys/net/netfilter/nf_conntrack_max"] = tc.max + "\n"
			}
			if tc.rke2 {
				files["etc/rancher/rke2/config.yaml"] = "kube-proxy-arg:\n  - proxy-mode=ipvs\n"
			}
			if tc.kubeadm {
				files["var/lib/kubelet/kubeadm-flags.env"] = "KUBELET_KUBEADM_ARGS=\"\"\n"
			}
			res, err := NewConntrackChecker(hostTree(t, files)).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			fix := check.JoinSteps(res.Remediation, "\n")
			for _, w := range tc.wantFix {
				if !strings.Contains(fix, w) {
					t.Errorf("remediation lacks %q:\n%s", w, fix)
				}
			}
			for _, w := range tc.wantNoFix {
				if strings.Contains(fix, w) {
					t.Errorf("remediation says %q:\n%s", w, fix)
				}
			}
			if res.Status != tc.wantStatus || res.Reason != tc.wantReason {
				t.Fatalf("got %s/%s (%s), want %s/%s", res.Status, res.Reason, res.Message, tc.wantStatus, tc.wantReason)
			}
			adv := false
			for _, f := range res.Findings {
				adv = adv || f.State().Advisory != nil
				if f.State().Conntrack == nil {
					t.Error("no conntrack state")
				}
			}
			if adv != tc.wantAdv {
				t.Errorf("advisory %t, want %t", adv, tc.wantAdv)
			}
		})
	}
}

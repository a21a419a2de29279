// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
)

func links(exists bool, addrs ...string) LinkReader {
	return func(name string) (Link, error) {
		l := Link{Name: name, Exists: exists}
		for _, a := range addrs {
			l.Addrs = append(l.Addrs, netip.MustParseAddr(a))
		}
		return l, nil
	}
}

func TestChecker(t *testing.T) {
	refused := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := l.Addr().String()
		l.Close()
		return a
	}
	served := func(mode, configz string) func(t *testing.T) string {
		return func(t *testing.T) string {
			return strings.TrimPrefix(fakeKubeProxy(t, mode, configz).URL, "http://")
		}
	}
	tests := []struct {
		name       string
		addr       func(t *testing.T) string
		link       LinkReader
		d          distro.Distro
		wantStatus check.Status
		wantReason string
		wantMsg    []string
		wantRem    []string
		wantNoRem  bool
	}{
		{name: "1.37.1 in IPVS mode (real bodies)", addr: served("ipvs", "testdata/configz-ipvs-lc.json"), link: links(true, "10.96.0.1", "192.0.2.10"),
			wantStatus: check.StatusOK, wantReason: ReasonIPVSMode, wantMsg: []string{"v1.37.1", "scheduler lc", "strictARP true", "deprecated since Kubernetes 1.35", "nftables"}},
		{name: "configured ipvs (1.30 shape) but fell back to iptables", addr: served("iptables", "testdata/configz-1.30-internal.json"), link: links(false), d: distro.RKE2,
			wantStatus: check.StatusProblem, wantReason: ReasonProxyModeNotIPVS, wantMsg: []string{"configured for ipvs but runs in iptables"}, wantRem: []string{"kube-proxy-arg", "proxy-mode=ipvs", "ipvs-scheduler=wrr", "servers and agents each read kube-proxy-arg from their own config.yaml"}},
		{name: "iptables by configuration", addr: served("iptables", "testdata/configz-iptables.json"), link: links(false), d: distro.RKE1,
			wantStatus: check.StatusSkipped, wantReason: check.ReasonIPVSNotInUse, wantMsg: []string{"kube-proxy runs in iptables mode, as configured: the IPVS prerequisites do not apply"}, wantNoRem: true},
		{name: "IPVS mode without kube-ipvs0", addr: served("ipvs", "testdata/configz-ipvs-rr.json"), link: links(false),
			wantStatus: check.StatusProblem, wantReason: ReasonKubeIPVS0Missing, wantMsg: []string{"kube-ipvs0"}, wantRem: []string{"RKE2", "kubeadm: kubectl -n kube-system delete pod"}},
		{name: "IPVS mode without kube-ipvs0 on RKE2: RKE2's own crictl", addr: served("ipvs", "testdata/configz-ipvs-rr.json"), link: links(false), d: distro.RKE2,
			wantStatus: check.StatusProblem, wantReason: ReasonKubeIPVS0Missing, wantMsg: []string{"kube-ipvs0"},
			wantRem: []string{"CRI_CONFIG_FILE=/var/lib/rancher/rke2/agent/etc/crictl.yaml /var/lib/rancher/rke2/bin/crictl rm -f $(CRI_CONFIG_FILE=/var/lib/rancher/rke2/agent/etc/crictl.yaml /var/lib/rancher/rke2/bin/crictl ps -q --name kube-proxy)"}},
		{name: "metrics port refuses connections", addr: refused, link: links(true),
			wantStatus: check.StatusSkipped, wantReason: ReasonUnreachable, wantMsg: []string{"refuses connections", "--kube-proxy-metrics-address"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChecker(CheckerConfig{Client: NewClient(tc.addr(t), time.Second), ReadLink: tc.link, Distro: tc.d})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.wantStatus || res.Reason != tc.wantReason {
				t.Fatalf("got %s/%s (%s), want %s/%s", res.Status, res.Reason, res.Message, tc.wantStatus, tc.wantReason)
			}
			for _, s := range tc.wantMsg {
				if !strings.Contains(res.Message, s) {
					t.Errorf("message %q lacks %q", res.Message, s)
				}
			}
			rem := check.JoinSteps(res.Remediation, "\n")
			if tc.wantNoRem && len(res.Remediation) > 0 {
				t.Errorf("remediation %q, want none", rem)
			}
			for _, s := range tc.wantRem {
				if !strings.Contains(rem, s) {
					t.Errorf("remediation lacks %q:\n%s", s, rem)
				}
			}
		})
	}
}

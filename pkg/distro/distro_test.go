// SPDX-License-Identifier: Apache-2.0

package distro

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

func TestDetect(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		want  Distro
	}{
		{"rke2", []string{"etc/rancher/rke2/config.yaml"}, RKE2},
		{"rke1", []string{"etc/kubernetes/ssl/kubecfg-kube-proxy.yaml"}, RKE1},
		{"kubeadm", []string{"var/lib/kubelet/kubeadm-flags.env"}, Kubeadm},
		{"rke2 wins over kubeadm markers", []string{"var/lib/rancher/rke2/agent/x", "etc/kubernetes/kubelet.conf"}, RKE2},
		{"nothing", nil, Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.files {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := Detect(hostfs.New(dir)); got != tt.want {
				t.Errorf("Detect() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKubeProxyRemediation(t *testing.T) {
	s := KubeProxySettings{Scheduler: "lc", StrictARP: true}
	tests := []struct {
		d    Distro
		want []string
	}{
		{RKE2, []string{"/etc/rancher/rke2/config.yaml", "kube-proxy-arg:", "  - proxy-mode=ipvs", "  - ipvs-scheduler=lc", "  - ipvs-strict-arp=true"}},
		{RKE1, []string{"cluster.yml", "extra_args:", `proxy-mode: "ipvs"`, `ipvs-scheduler: "lc"`, `ipvs-strict-arp: "true"`}},
		{Kubeadm, []string{"configmap kube-proxy", "mode: ipvs", "  scheduler: lc", "  strictARP: true"}},
		{Unknown, []string{"configmap kube-proxy", "mode: ipvs"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.d), func(t *testing.T) {
			got := check.JoinSteps(tt.d.KubeProxyRemediation(s), "\n")
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("remediation for %s lacks %q:\n%s", tt.d, w, got)
				}
			}
		})
	}
}

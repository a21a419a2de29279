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
		d      Distro
		want   []string
		wantNo []string
	}{
		// kube-proxy-arg is read from each node's own config.yaml, agents
		// included (rancher/rke2 pkg/cli/cmds/agent.go copies the flag):
		// "on every server node" would leave the agents in the old mode.
		{RKE2, []string{"/etc/rancher/rke2/config.yaml on this node", "servers and agents each read kube-proxy-arg from their own config.yaml", "kube-proxy-arg:", "  - proxy-mode=ipvs", "  - ipvs-scheduler=lc", "  - ipvs-strict-arp=true", "rke2-agent on an agent"},
			[]string{"every server node"}},
		{RKE1, []string{"cluster.yml", "extra_args:", `proxy-mode: "ipvs"`, `ipvs-scheduler: "lc"`, `ipvs-strict-arp: "true"`}, nil},
		{Kubeadm, []string{"configmap kube-proxy", "mode: ipvs", "  scheduler: lc", "  strictARP: true"}, nil},
		{Unknown, []string{"configmap kube-proxy", "mode: ipvs"}, nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.d), func(t *testing.T) {
			got := check.JoinSteps(tt.d.KubeProxyRemediation(s), "\n")
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("remediation for %s lacks %q:\n%s", tt.d, w, got)
				}
			}
			for _, w := range tt.wantNo {
				if strings.Contains(got, w) {
					t.Errorf("remediation for %s says %q:\n%s", tt.d, w, got)
				}
			}
		})
	}
}

func TestKubeProxyRestart(t *testing.T) {
	// RKE2's crictl is not on PATH and a packaged crictl talks to another
	// socket: the step names RKE2's binary and its configuration.
	rke2 := "CRI_CONFIG_FILE=/var/lib/rancher/rke2/agent/etc/crictl.yaml /var/lib/rancher/rke2/bin/crictl rm -f $(CRI_CONFIG_FILE=/var/lib/rancher/rke2/agent/etc/crictl.yaml /var/lib/rancher/rke2/bin/crictl ps -q --name kube-proxy)"
	kubeadm := "kubectl -n kube-system delete pod -l k8s-app=kube-proxy --field-selector spec.nodeName=<node>"
	tests := []struct {
		d      Distro
		want   []string
		wantNo []string
	}{
		{RKE2, []string{"Restart kube-proxy on this node and read its log:", rke2}, []string{kubeadm}},
		{RKE1, []string{"docker restart kube-proxy"}, []string{"crictl", kubeadm}},
		{Kubeadm, []string{kubeadm}, []string{"crictl"}},
		{Unknown, []string{rke2, kubeadm}, nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.d), func(t *testing.T) {
			got := tt.d.KubeProxyRestart("read its log").String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("restart for %s lacks %q:\n%s", tt.d, w, got)
				}
			}
			for _, w := range tt.wantNo {
				if strings.Contains(got, w) {
					t.Errorf("restart for %s says %q:\n%s", tt.d, w, got)
				}
			}
			if strings.Contains(got, "crictl rm") && !strings.Contains(got, "/var/lib/rancher/rke2/bin/crictl rm") {
				t.Errorf("restart for %s runs a crictl that is not RKE2's:\n%s", tt.d, got)
			}
		})
	}
}

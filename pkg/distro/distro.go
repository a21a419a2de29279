// SPDX-License-Identifier: Apache-2.0

// Package distro tells which Kubernetes distribution set up a node (RKE2,
// RKE1, kubeadm) from files on the host, and words kube-proxy remediation the
// way that distribution expects it to be done. It only reads.
package distro

import (
	"fmt"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Distro is a Kubernetes distribution.
type Distro string

const (
	// RKE2 is Rancher's RKE2 (kube-proxy is a static pod configured from /etc/rancher/rke2/config.yaml).
	RKE2 Distro = "rke2"
	// RKE1 is Rancher's RKE (kube-proxy is a container configured from cluster.yml).
	RKE1 Distro = "rke1"
	// Kubeadm is a kubeadm cluster (kube-proxy is a DaemonSet configured from the kube-proxy ConfigMap).
	Kubeadm Distro = "kubeadm"
	// Unknown is any other node.
	Unknown Distro = "unknown"
)

// markers are checked in order; the first distro with an existing marker wins.
var markers = []struct {
	d     Distro
	paths []string
}{
	{RKE2, []string{"/etc/rancher/rke2/config.yaml", "/etc/rancher/rke2", "/var/lib/rancher/rke2"}},
	{RKE1, []string{"/etc/kubernetes/ssl/kubecfg-kube-proxy.yaml", "/etc/kubernetes/ssl/kube-proxy.pem"}},
	{Kubeadm, []string{"/var/lib/kubelet/kubeadm-flags.env", "/etc/kubernetes/kubelet.conf"}},
}

// Detect returns the distribution that set up the node at root.
func Detect(root hostfs.Root) Distro {
	for _, m := range markers {
		for _, p := range m.paths {
			if _, err := root.Stat(p); err == nil {
				return m.d
			}
		}
	}
	return Unknown
}

// KubeProxySettings are kube-proxy settings a remediation asks for.
type KubeProxySettings struct {
	// Scheduler is the IPVS scheduler (e.g. "rr", "lc"); empty leaves it out.
	Scheduler string
	// StrictARP asks for strict ARP (required by MetalLB layer 2 with IPVS).
	StrictARP bool
}

// KubeProxyRemediation returns the steps that put kube-proxy into IPVS mode
// with the given settings on this distribution.
func (d Distro) KubeProxyRemediation(s KubeProxySettings) []check.Step {
	flags := []string{"proxy-mode=ipvs"}
	if s.Scheduler != "" {
		flags = append(flags, "ipvs-scheduler="+s.Scheduler)
	}
	if s.StrictARP {
		flags = append(flags, "ipvs-strict-arp=true")
	}
	switch d {
	case RKE2:
		step := check.Step{"RKE2: add to /etc/rancher/rke2/config.yaml on every server node (editing the kube-proxy static pod manifest is reverted on restart):", "kube-proxy-arg:"}
		for _, f := range flags {
			step = append(step, "  - "+f)
		}
		return []check.Step{step, {"then restart: systemctl restart rke2-server (or rke2-agent on agents)"}}
	case RKE1:
		step := check.Step{"RKE1: set in cluster.yml, then run rke up:", "services:", "  kubeproxy:", "    extra_args:"}
		for _, f := range flags {
			k, v, _ := strings.Cut(f, "=")
			step = append(step, fmt.Sprintf("      %s: %q", k, v))
		}
		return []check.Step{step}
	default:
		step := check.Step{"kubeadm: kubectl -n kube-system edit configmap kube-proxy, in config.conf set:", "mode: ipvs", "ipvs:"}
		if s.Scheduler != "" {
			step = append(step, "  scheduler: "+s.Scheduler)
		}
		if s.StrictARP {
			step = append(step, "  strictARP: true")
		}
		return []check.Step{step, {"then: kubectl -n kube-system rollout restart daemonset kube-proxy"}}
	}
}

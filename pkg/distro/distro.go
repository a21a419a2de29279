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
		// Servers and agents each read kube-proxy-arg from their own
		// config file (rancher/rke2 pkg/cli/cmds/server.go and agent.go
		// both copy k3s's kube-proxy-arg flag), so the edit goes on every
		// node that runs kube-proxy, agents included.
		step := check.Step{"RKE2: add to /etc/rancher/rke2/config.yaml on this node, and on every other node that should run kube-proxy this way: servers and agents each read kube-proxy-arg from their own config.yaml (an edit of the kube-proxy static pod manifest is reverted on restart):", "kube-proxy-arg:"}
		for _, f := range flags {
			step = append(step, "  - "+f)
		}
		return []check.Step{step, {"then restart RKE2 on that node: systemctl restart rke2-server on a server, systemctl restart rke2-agent on an agent"}}
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

// RKE2Crictl is RKE2's own crictl with the configuration that points it at
// RKE2's containerd; a crictl from the distribution's packages talks to
// another socket. Source: rancher/rke2 pkg/cli/cmds/completion.go (the
// CRI_CONFIG_FILE it exports) and its bin directory.
const RKE2Crictl = "CRI_CONFIG_FILE=/var/lib/rancher/rke2/agent/etc/crictl.yaml /var/lib/rancher/rke2/bin/crictl"

// KubeProxyRestart returns the step that restarts kube-proxy on one node,
// as root on that node (RKE2, RKE1) or with kubectl (kubeadm); why says
// what to do after, e.g. "read its log for the sync that hangs or fails".
// An unknown distribution gets the RKE2 and kubeadm ways.
func (d Distro) KubeProxyRestart(why string) check.Step {
	rke2 := "RKE2 (as root on the node; kubelet starts the static pod's container again): " + RKE2Crictl + " rm -f $(" + RKE2Crictl + " ps -q --name kube-proxy)"
	kubeadm := "kubeadm: kubectl -n kube-system delete pod -l k8s-app=kube-proxy --field-selector spec.nodeName=<node>"
	head := "Restart kube-proxy on this node"
	if why != "" {
		head += " and " + why
	}
	switch d {
	case RKE2:
		return check.Step{head + ":", rke2}
	case RKE1:
		return check.Step{head + ":", "RKE1 (as root on the node): docker restart kube-proxy"}
	case Kubeadm:
		return check.Step{head + ":", kubeadm}
	default:
		return check.Step{head + ":", rke2, kubeadm}
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpsysctl"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// kubeAPITimeout bounds each API request of a check.
const kubeAPITimeout = 10 * time.Second

// kubeClient returns the clientset the checks read the cluster through:
// the one the command already built (the agent's), else one from
// --kubeconfig, else nil (node-local checks only).
func (o *checkOptions) kubeClient() (kubernetes.Interface, error) {
	if o.clientset != nil {
		return o.clientset, nil
	}
	if o.kubeconfig == "" {
		return nil, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.Timeout = kubeAPITimeout
	cfg.UserAgent = "ipvs-guard"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a client from --kubeconfig %s: %w", o.kubeconfig, err)
	}
	return cs, nil
}

// kubeProxyClient reads kube-proxy at --kube-proxy-metrics-address.
func (o *checkOptions) kubeProxyClient() *kubeproxy.Client {
	addr := o.kubeProxyMetrics
	if addr == "" {
		addr = kubeproxy.DefaultMetricsAddress
	}
	return kubeproxy.NewClient(addr, kubeproxy.DefaultTimeout)
}

// schedulerResolver resolves the IPVS scheduler every check assumes
// (DESIGN §8): --scheduler, else kube-proxy's /configz, else the kube-proxy
// ConfigMap (with a kubeconfig), else the last scheduler one of them gave,
// else rr.
func (o *checkOptions) schedulerResolver(kp *kubeproxy.Client, cs kubernetes.Interface) *kubeproxy.SchedulerResolver {
	sources := []kubeproxy.SchedulerSource{kubeproxy.ConfigzScheduler(kp)}
	if cs != nil {
		sources = append(sources, kubeproxy.ConfigMapScheduler(cs))
	}
	return kubeproxy.NewSchedulerResolver(o.scheduler, sources...)
}

// ipvsCheckers builds the kube-proxy, ipvs and arp-sysctls checks. They
// only read: none of them can load a module (ipvs.Handle never lets
// moby/ipvs exec modprobe and touches netlink only once ip_vs is loaded).
func (o *checkOptions) ipvsCheckers(root hostfs.Root, cs kubernetes.Interface) ([]check.Checker, error) {
	kp := o.kubeProxyClient()
	d := distro.Detect(root)
	var fallback kubeproxy.VersionSource
	var cluster ipvscheck.Cluster
	var lbIPs arpsysctl.LoadBalancerIPs
	if cs != nil {
		fallback = kubeproxy.NodeVersion(cs, o.node())
		cluster = o.cluster
		if cluster == nil {
			cluster = ipvscheck.NewCluster(cs)
		}
		lbIPs = ipvscheck.LoadBalancerIPs(cluster)
	}
	kpc, err := kubeproxy.NewChecker(kubeproxy.CheckerConfig{
		Client: kp, ReadLink: kubeproxy.ReadLink, FallbackVersion: fallback, Scheduler: o.scheduler, Distro: d,
	})
	if err != nil {
		return nil, err
	}
	ic, err := ipvscheck.NewChecker(ipvscheck.Config{
		IPVS:      ipvs.New(root),
		ReadLink:  kubeproxy.ReadLink,
		KubeProxy: kp,
		Cluster:   cluster,
		NodeName:  o.node(),
		Scheduler: o.schedulers.Resolve,
		Distro:    d,
		Settle:    o.settle,
	})
	if err != nil {
		return nil, err
	}
	var ifaces []string
	if o.probeInterface != "" {
		ifaces = []string{o.probeInterface}
	}
	ac, err := arpsysctl.NewChecker(arpsysctl.Config{
		Root: root, Interfaces: ifaces, ReadLink: kubeproxy.ReadLink, LoadBalancerIPs: lbIPs, KubeProxy: kp, Distro: d,
	})
	if err != nil {
		return nil, err
	}
	return []check.Checker{kpc, ic, ac}, nil
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-guard/ipvs-guard/pkg/agent"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// withClusterARP replaces the arp check built from --probe-ip by one over
// the cluster's LoadBalancer IPs (shardK probers per IP, 0 = every IP),
// unless --probe-ip was given.
func (o *checkOptions) withClusterARP(cs []check.Checker, view *agent.ClusterView, shardK int) ([]check.Checker, error) {
	if len(o.probeIPs) > 0 {
		return cs, nil
	}
	arp, err := arpcheck.NewChecker(arpcheck.CheckerOptions{
		Targets:    view.ARPTargets(shardK),
		NodeForMAC: view.ResponderNode,
	})
	if err != nil {
		return nil, err
	}
	return replaceCheck(cs, arp), nil
}

// diagnoseClusterView lists the cluster once (Services, Nodes, MetalLB's
// ServiceL2Status) for a diagnose run with --kubeconfig; nil without one.
func (o *checkOptions) diagnoseClusterView(ctx context.Context, cs kubernetes.Interface) (*agent.ClusterView, error) {
	if cs == nil || o.kubeconfig == "" {
		return nil, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.Timeout = kubeAPITimeout
	_, dyn, meta, err := clusterClients(cfg)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
	}
	view := agent.NewClusterView(o.node(), cs, dyn, meta)
	sctx, cancel := context.WithTimeout(ctx, kubeAPITimeout)
	defer cancel()
	if err := view.Sync(sctx); err != nil {
		return nil, err
	}
	return view, nil
}

// withDiagnoseClusterARP gives diagnose an arp check over every LoadBalancer
// IP of the cluster when --kubeconfig is set and --probe-ip is not. When the
// cluster cannot be listed, the arp check reports that error (exit 2 unless
// another check found a problem) and the node-local checks still run.
func (o *checkOptions) withDiagnoseClusterARP(ctx context.Context, cs []check.Checker) ([]check.Checker, error) {
	if o.kubeconfig == "" || len(o.probeIPs) > 0 {
		return cs, nil
	}
	kube, err := o.kubeClient()
	if err != nil {
		return nil, err
	}
	view, err := o.diagnoseClusterView(ctx, kube)
	if err != nil {
		failed := check.Func{CheckName: check.NameARP, Fn: func(context.Context) (check.Result, error) {
			return check.Result{}, fmt.Errorf("reading LoadBalancer IPs from the cluster: %w", err)
		}}
		return replaceCheck(cs, failed), nil
	}
	if view == nil {
		return cs, nil
	}
	return o.withClusterARP(cs, view, 0)
}

// replaceCheck returns cs with the checker of c's name replaced by c (appended when absent).
func replaceCheck(cs []check.Checker, c check.Checker) []check.Checker {
	out := slices.Clone(cs)
	for i, old := range out {
		if old.Name() == c.Name() {
			out[i] = c
			return out
		}
	}
	return append(out, c)
}

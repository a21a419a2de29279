// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/diagnose"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// checkOptions are the flags shared by `diagnose` and `run` (DESIGN §8).
type checkOptions struct {
	kubeconfig       string
	nodeName         string
	root             string
	scheduler        string
	kubeProxyMetrics string
	probeIPs         []string
	probeInterface   string

	// clientset, when set (by `run`, which builds its own, in-cluster or
	// from --kubeconfig), is what the cluster-aware checks read through.
	clientset kubernetes.Interface
	// cluster, when set (by `run`, from its informer caches), is what the
	// ipvs and arp-sysctls checks read Services and EndpointSlices from;
	// otherwise they list through the clientset.
	cluster ipvscheck.Cluster

	// schedulers resolves the IPVS scheduler every check assumes, on every
	// run (built by checkers).
	schedulers *kubeproxy.SchedulerResolver
	// loader, when set, loads modules for the modules check (the agent
	// passes one that counts load attempts); nil uses the native loader.
	loader modules.Loader
	// settle, when set (by `run`), holds back ipvs findings until they
	// persist, so kube-proxy's lag behind a Service change is no problem.
	settle *check.Settler
}

func (o *checkOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for cluster checks (Services, kube-proxy ConfigMap, MetalLB); none means node-local checks only")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, else the hostname)")
	f.StringVar(&o.root, "root", "/", "prefix for every host path read or written (/proc, /sys, /lib/modules, /etc, /run, /usr/lib)")
	f.StringVar(&o.scheduler, "scheduler", "", "IPVS scheduler (default: from kube-proxy's /configz or ConfigMap, else rr)")
	f.StringVar(&o.kubeProxyMetrics, "kube-proxy-metrics-address", "127.0.0.1:10249", "where kube-proxy serves /proxyMode and /configz")
	f.StringSliceVar(&o.probeIPs, "probe-ip", nil, "ARP-probe these IPs (repeatable or comma-separated)")
	f.StringVar(&o.probeInterface, "interface", "", "interface to ARP-probe on (default: from a route lookup)")
}

// node returns the node name, falling back to the hostname.
func (o *checkOptions) node() string {
	if o.nodeName != "" {
		return o.nodeName
	}
	h, _ := os.Hostname()
	return h
}

func newDiagnoseCommand() *cobra.Command {
	var (
		opts   checkOptions
		fix    bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Run every check once, print a report with the fix, exit 0 healthy / 1 problems / 2 could not check",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output must be text or json, not %q", output)
			}
			root := hostfs.New(opts.root)
			kernel, _ := root.KernelRelease()
			checkers, err := opts.checkers(root, fix)
			if err != nil {
				return err
			}
			if checkers, err = opts.withDiagnoseClusterARP(cmd.Context(), checkers); err != nil {
				return err
			}
			report := diagnose.Run(cmd.Context(), opts.node(), kernel, checkers)
			if output == "json" {
				err = report.WriteJSON(cmd.OutOrStdout())
			} else {
				err = report.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if code := report.ExitCode(); code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().BoolVar(&fix, "fix", false, "repair what can be repaired (load modules, write the modules-load.d file); without it nothing is changed")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// arpChecker builds the arp check over --probe-ip (and --interface). Without
// probe IPs it has nothing to look at and reports skipped.
func (o *checkOptions) arpChecker() (check.Checker, error) {
	targets, err := arpcheck.ParseTargets(o.probeIPs, o.probeInterface)
	if err != nil {
		return nil, err
	}
	return arpcheck.NewChecker(arpcheck.CheckerOptions{Targets: arpcheck.StaticTargets(targets...)})
}

// checkers builds the checks diagnose runs, in report order. With remediate
// false nothing they do may load a module or write a file.
func (o *checkOptions) checkers(root hostfs.Root, remediate bool) ([]check.Checker, error) {
	kube, err := o.kubeClient()
	if err != nil {
		return nil, err
	}
	o.schedulers = o.schedulerResolver(o.kubeProxyClient(), kube)
	cs := []check.Checker{
		modules.NewChecker(modules.Config{
			Root: root,
			SchedulerFunc: func(ctx context.Context) string {
				s, _ := o.schedulers.Resolve(ctx)
				return s
			},
			Remediate: remediate,
			Loader:    o.loader,
		}),
	}
	ipvsChecks, err := o.ipvsCheckers(root, kube)
	if err != nil {
		return nil, err
	}
	cs = append(cs, ipvsChecks...)
	arp, err := o.arpChecker()
	if err != nil {
		return nil, err
	}
	cs = append(cs, arp)
	return cs, nil
}

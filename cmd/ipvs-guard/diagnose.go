// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/checkset"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/diagnose"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// checkOptions are the flags shared by `diagnose` and `run` (docs/design.md §8).
type checkOptions struct {
	kubeconfig       string
	nodeName         string
	root             string
	scheduler        string
	kubeProxyMetrics string
	assumeProxyMode  string
	probeIPs         []string
	probeInterface   string
	metallbNS        string
}

func (o *checkOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for cluster checks (Services, kube-proxy ConfigMap, MetalLB); default $KUBECONFIG, else the pod's service account (in-cluster); with none, node-local checks only")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, else the hostname)")
	f.StringVar(&o.root, "root", "/", "prefix for every host path read or written (/proc, /sys, /lib/modules, /etc, /run, /usr/lib)")
	f.StringVar(&o.scheduler, "scheduler", "", "IPVS scheduler (default: from kube-proxy's /configz or ConfigMap, else rr)")
	f.StringVar(&o.kubeProxyMetrics, "kube-proxy-metrics-address", "127.0.0.1:10249", "where kube-proxy serves /proxyMode and /configz")
	f.StringVar(&o.assumeProxyMode, "assume-proxy-mode", "", "the mode kube-proxy is configured for when neither kube-proxy, the node's configuration nor the kernel's state tells it (ipvs, iptables, nftables); empty: the mode is then unknown and nothing is loaded or declared")
	f.StringSliceVar(&o.probeIPs, "probe-ip", nil, "probe these IPs: IPv4 with ARP, IPv6 with neighbour discovery (repeatable or comma-separated)")
	f.StringVar(&o.probeInterface, "interface", "", "interface to probe on (default: from a route lookup)")
	f.StringVar(&o.metallbNS, "metallb-namespace", clusterview.DefaultMetalLBNamespace, "namespace of MetalLB's IPAddressPools, L2Advertisements and speaker Pods, read (list) to say why a LoadBalancer IP this node probes is not answered")
}

// validate refuses flag values no check can use (a usage error, exit 2,
// before anything is read or written).
func (o *checkOptions) validate() error {
	if o.root == "" {
		// An unset variable (--root "$HOST_ROOT") must not mean the host.
		return errors.New("--root is empty: give the host tree's path, or --root / for this host")
	}
	if err := modules.ValidateScheduler(o.scheduler); err != nil {
		return fmt.Errorf("--scheduler: %w", err)
	}
	if o.kubeProxyMetrics != "" {
		if err := kubeproxy.ValidateAddress(o.kubeProxyMetrics); err != nil {
			return fmt.Errorf("--kube-proxy-metrics-address: %w", err)
		}
	}
	switch o.assumeProxyMode {
	case "", kubeproxy.ModeIPVS, kubeproxy.ModeIPTables, kubeproxy.ModeNFTables:
	default:
		return fmt.Errorf("--assume-proxy-mode: %q is not ipvs, iptables or nftables", o.assumeProxyMode)
	}
	// What the addresses alone say (not IP, not unicast); what this node's
	// interfaces say (its own address, a subnet's broadcast) is checked
	// when the arp check is built.
	if _, err := arpcheck.ParseTargets(o.probeIPs, o.probeInterface); err != nil {
		return fmt.Errorf("--probe-ip: %w", err)
	}
	return nil
}

// usageArgs makes args' refusals usage errors.
func usageArgs(args cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := args(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
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
		opts       checkOptions
		fix        bool
		output     string
		targetMode string
		prove      bool
	)
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Run every check once, print a report with the fix, exit 0 healthy / 1 problems / 2 could not check",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageError{fmt.Errorf("--output must be text or json, not %q", output)}
			}
			if err := opts.validate(); err != nil {
				return usageError{err}
			}
			if err := checkset.ValidateTargetMode(targetMode); err != nil {
				return usageError{fmt.Errorf("--target-mode: %w", err)}
			}
			if prove && targetMode != checkset.TargetModeNFTables {
				return usageError{fmt.Errorf("--prove-kernel needs --target-mode %s", checkset.TargetModeNFTables)}
			}
			cfg := opts.config(fix)
			cfg.TargetMode = targetMode
			cfg.ProveKernel = prove
			kernel, _ := cfg.Root.KernelRelease()
			note := cmd.ErrOrStderr()
			if output == "json" {
				// The checks needing the cluster say so in the report
				// (NoKubeconfig); stderr may be merged into stdout.
				note = io.Discard
			}
			cluster, err := opts.diagnoseCluster(note)
			if err != nil {
				return err
			}
			cfg.Cluster = cluster
			checkers, err := checkset.Build(cmd.Context(), cfg)
			if errors.Is(err, arpcheck.ErrUnprobeable) || errors.Is(err, arpcheck.ErrNoInterface) {
				// What this node's interfaces say of --probe-ip and
				// --interface: as much a usage error as what the flags
				// alone say.
				return usageError{err}
			}
			if err != nil {
				return err
			}
			report := diagnose.Run(cmd.Context(), opts.node(), kernel, checkers)
			if output == "json" {
				err = report.WriteJSON(cmd.OutOrStdout())
			} else {
				err = report.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return outputError{err}
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
	cmd.Flags().StringVar(&targetMode, "target-mode", "", "also report whether this node is ready for kube-proxy in this mode (nftables) and what the switch changes")
	cmd.Flags().BoolVar(&prove, "prove-kernel", false, "with --target-mode nftables: let the kernel load the nf_tables modules the proof of kube-proxy's expressions needs, and nothing else (no IPVS module, no modules-load.d file; --fix does both)")
	return cmd
}

// config is the check set's configuration from the shared flags, without
// cluster access (each command adds its own).
func (o *checkOptions) config(remediate bool) checkset.Config {
	return checkset.Config{
		Root:                    hostfs.New(o.root),
		NodeName:                o.node(),
		Scheduler:               o.scheduler,
		KubeProxyMetricsAddress: o.kubeProxyMetrics,
		AssumeProxyMode:         o.assumeProxyMode,
		ProbeIPs:                o.probeIPs,
		ProbeInterface:          o.probeInterface,
		Remediate:               remediate,
	}
}

// kubeAPITimeout bounds each API request of a diagnose run.
const kubeAPITimeout = 10 * time.Second

// diagnoseCluster is diagnose's access to the cluster (the checks list
// once, every IP probed from here) from --kubeconfig, $KUBECONFIG or the
// pod's service account; nil, with a note on w, without any.
func (o *checkOptions) diagnoseCluster(w io.Writer) (*checkset.Cluster, error) {
	cfg, origin, guard, err := clusterConfig(o.kubeconfig)
	if errors.Is(err, kube.ErrNoConfig) {
		fmt.Fprintf(w, "note: node-local checks only: %v\n", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cfg.Timeout = kubeAPITimeout
	cfg.UserAgent = "ipvs-guard"
	cs, dyn, meta, err := clusterClients(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", origin, err)
	}
	return &checkset.Cluster{Client: cs, Dynamic: dyn, Metadata: meta, ListTimeout: kubeAPITimeout,
		MetalLBNamespace: o.metallbNS, LastError: guard.LastError}, nil
}

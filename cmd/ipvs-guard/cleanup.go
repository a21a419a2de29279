// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// cleanupPageSize bounds each Node list page.
const cleanupPageSize = 500

func newCleanupCommand() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove ipvs-guard's Node conditions and annotations from every Node (the chart runs it on helm uninstall)",
		Long: "Remove the five ipvs-guard Node conditions and the ipvs-guard.io/macs annotation from every Node,\n" +
			"so nothing stale is left once the agent is gone. The chart runs it as a post-delete hook,\n" +
			"after the agent's RBAC is deleted, so a terminating agent cannot write them back.\n" +
			"Cost: one paged Node list and at most two patches per Node that carries them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.UserAgent = "ipvs-guard-cleanup"
			cs, err := kube.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("building the Kubernetes client: %w", err)
			}
			return cleanupNodes(cmd.Context(), cs)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	return cmd
}

// cleanupNodes removes ipvs-guard's conditions and annotations from every
// Node, page by page; it tries every Node and returns every failure.
func cleanupNodes(ctx context.Context, cs kube.Interface) error {
	logger := klog.FromContext(ctx)
	client := nodestatus.NewClient(cs)
	var errs []error
	cleaned, seen := 0, 0
	opts := metav1.ListOptions{Limit: cleanupPageSize}
	for {
		list, err := cs.Nodes().List(ctx, opts)
		if err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		for i := range list.Items {
			n := &list.Items[i]
			seen++
			wrote, err := nodestatus.Remove(ctx, client, n, []string{nodestatus.MACsAnnotation, nodestatus.DownMACsAnnotation})
			if err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
				continue
			}
			if wrote {
				cleaned++
				logger.V(1).Info("Removed ipvs-guard conditions and annotations", "node", n.Name)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	logger.Info("ipvs-guard cleanup done", "nodes", seen, "cleaned", cleaned, "failed", len(errs))
	return errors.Join(errs...)
}

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

// cleanupMaxPages bounds the pages of the Node list: 50,000 Nodes, ten
// times the largest cluster Kubernetes supports. An API server that hands
// out continue tokens past it would keep cleanup listing forever.
const cleanupMaxPages = 100

// errTooManyPages: the Node list goes on past cleanupMaxPages.
var errTooManyPages = errors.New("still more Nodes after the most pages a cluster can have")

func newCleanupCommand() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove ipvs-guard's Node conditions and annotations from every Node (the chart runs it on helm uninstall)",
		Long: "Remove the five ipvs-guard Node conditions and the ipvs-guard.io/macs annotation from every Node,\n" +
			"so nothing stale is left once the agent is gone. The chart runs it as a post-delete hook,\n" +
			"after the agent's RBAC is deleted, so a terminating agent cannot write them back.\n" +
			"Cost: one paged Node list and at most two patches per Node that carries them.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, origin, guard, err := clusterConfig(kubeconfig)
			if err != nil {
				return err
			}
			// One page is handled and dropped before the next is read:
			// each answer is bounded, not the Nodes of the cluster.
			guard.PagesLimit = -1
			klog.FromContext(cmd.Context()).V(1).Info("Reading the cluster", "config", origin.String(), "server", cfg.Host)
			cfg.UserAgent = "ipvs-guard-cleanup"
			// No watch here: every request is bounded.
			cfg.Timeout = kubeAPITimeout
			cs, err := kube.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("building the Kubernetes client: %w", err)
			}
			return cleanupNodes(cmd.Context(), cs)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else the pod's service account: in-cluster)")
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
	followed := map[string]bool{}
	for {
		list, err := cs.Nodes().List(ctx, opts)
		if err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		if len(list.Items) > cleanupPageSize {
			return fmt.Errorf("listing nodes: the API server answered %d Nodes to a request for at most %d", len(list.Items), cleanupPageSize)
		}
		for i := range list.Items {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("stopped after %d nodes (%d cleaned): %w", seen, cleaned, errors.Join(append(errs, err)...))
			}
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
		if followed[list.Continue] {
			// A broken or hostile API server: the same page again and again.
			return errors.Join(append(errs, fmt.Errorf("listing nodes: %w", kube.ErrContinueRepeated))...)
		}
		followed[list.Continue] = true
		if len(followed) >= cleanupMaxPages {
			return errors.Join(append(errs, fmt.Errorf("listing nodes: %w: %d pages of %d", errTooManyPages, len(followed), cleanupPageSize))...)
		}
		opts.Continue = list.Continue
	}
	logger.Info("ipvs-guard cleanup done", "nodes", seen, "cleaned", cleaned, "failed", len(errs))
	return errors.Join(errs...)
}

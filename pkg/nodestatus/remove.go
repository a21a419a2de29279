// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Remove deletes every condition type ipvs-guard owns and the given
// annotations from node (as listed, no extra read), writing only what is
// there: no request for a Node that carries none of them, one status patch
// for the conditions, one metadata patch for the annotations. Deleting by key
// is idempotent, so a concurrent writer needs no conflict retry. It reports
// whether it wrote.
func Remove(ctx context.Context, c Client, node *corev1.Node, annotations []string) (bool, error) {
	owned := map[ConditionType]bool{}
	for _, t := range AllConditionTypes() {
		owned[t] = true
	}
	var conds []any
	for _, cond := range node.Status.Conditions {
		if owned[ConditionType(cond.Type)] {
			conds = append(conds, map[string]any{"type": string(cond.Type), "$patch": "delete"})
		}
	}
	anns := map[string]any{}
	for _, k := range annotations {
		if _, ok := node.Annotations[k]; ok {
			anns[k] = nil
		}
	}
	wrote := false
	if len(conds) > 0 {
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
		if err != nil {
			return wrote, fmt.Errorf("encoding condition removal: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if _, err := c.PatchNodeStatus(pctx, node.Name, patch); err != nil {
			return wrote, err
		}
		wrote = true
	}
	if len(anns) > 0 {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": anns}})
		if err != nil {
			return wrote, fmt.Errorf("encoding annotation removal: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if _, err := c.PatchNodeMetadata(pctx, node.Name, patch); err != nil {
			return wrote, err
		}
		wrote = true
	}
	return wrote, nil
}

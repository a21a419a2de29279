// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// Client is the narrow API surface the Manager writes through.
type Client interface {
	// GetNode reads the Node from the API server (never from a cache).
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// PatchNodeStatus applies a strategic-merge patch to the Node's status subresource.
	PatchNodeStatus(ctx context.Context, name string, patch []byte) (*corev1.Node, error)
	// PatchNodeMetadata applies a JSON merge patch to the Node (metadata only).
	PatchNodeMetadata(ctx context.Context, name string, patch []byte) (*corev1.Node, error)
}

// NewClient returns a Client backed by cs.
func NewClient(cs kube.Interface) Client { return clientsetClient{cs} }

type clientsetClient struct{ cs kube.Interface }

func (c clientsetClient) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := c.cs.Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	return n, nil
}

func (c clientsetClient) PatchNodeStatus(ctx context.Context, name string, patch []byte) (*corev1.Node, error) {
	n, err := c.cs.Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patching status of node %s: %w", name, err)
	}
	return n, nil
}

func (c clientsetClient) PatchNodeMetadata(ctx context.Context, name string, patch []byte) (*corev1.Node, error) {
	n, err := c.cs.Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patching metadata of node %s: %w", name, err)
	}
	return n, nil
}

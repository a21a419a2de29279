// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
)

// IPVSCluster serves the ipvs check's Services and EndpointSlices from the
// view's caches, so a resync sends no LIST to the API server and keeps
// working from the last known state while it is down.
func (v *ClusterView) IPVSCluster() ipvscheck.Cluster { return viewCluster{v} }

type viewCluster struct{ v *ClusterView }

var _ ipvscheck.Cluster = viewCluster{}

// Services returns the cached Services themselves: copying 5,000 of them
// for every check run was megabytes of garbage each time.
func (c viewCluster) Services(context.Context) ([]*corev1.Service, error) {
	return c.v.Services()
}

func (c viewCluster) EndpointSlices(context.Context) ([]*discoveryv1.EndpointSlice, error) {
	if !c.v.slicesSynced() {
		return nil, ErrNotSynced
	}
	eps, err := c.v.slices.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing EndpointSlices from cache: %w", err)
	}
	return eps, nil
}

// stripManagedFields drops managed fields, never read, from cached objects.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

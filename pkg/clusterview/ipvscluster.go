// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
)

// IPVSCluster serves the ipvs check's Services from the view's cache, so a
// resync sends no LIST to the API server and keeps working from the last
// known state while it is down, and the EndpointSlices of the few Services
// the check asks for on demand.
func (v *View) IPVSCluster() ipvscheck.Cluster { return viewCluster{v} }

type viewCluster struct{ v *View }

var _ ipvscheck.Cluster = viewCluster{}

// Services returns the cached Services themselves: copying 5,000 of them
// for every check run was megabytes of garbage each time.
func (c viewCluster) Services(context.Context) ([]*corev1.Service, error) {
	return c.v.Services()
}

// EndpointSlices reads the EndpointSlices of the given Services on demand
// (endpoints.go): the view watches none.
func (c viewCluster) EndpointSlices(ctx context.Context, services []string) ([]*discoveryv1.EndpointSlice, error) {
	return c.v.endpoints.get(ctx, services)
}

// stripManagedFields drops managed fields, never read, from cached objects.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

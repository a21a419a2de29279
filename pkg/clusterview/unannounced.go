// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Unannounced explains, for an ingress IP MetalLB's ServiceL2Status names
// no announcing node for, why no speaker announces it; "" when MetalLB's
// ServiceL2Status is not watched (no such CRD: nothing can be said) or a
// node announces it.
//
// MetalLB (v0.14+) writes a ServiceL2Status as soon as the speaker it
// elects announces the IP, so its absence means no speaker announces it:
// with externalTrafficPolicy Local only a node that has both a ready
// endpoint and a running speaker may, otherwise only a node an
// L2Advertisement of the IP's pool selects (nodeSelectors) and whose
// speaker has the interfaces the advertisement names.
func (v *View) Unannounced(ctx context.Context, in LoadBalancerIngress) string {
	if in.AnnouncingNode != "" || len(in.Contenders) > 0 || !v.HasServiceL2Status() {
		return ""
	}
	const none = "MetalLB announces it from no node (no ServiceL2Status)"
	svc, err := v.services.Services(in.Service.Namespace).Get(in.Service.Name)
	if err != nil || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return none + ": no speaker can announce it on a node its L2Advertisement selects (check the advertisement's nodeSelectors and interfaces, and that the speakers run: kubectl -n metallb-system get servicel2statuses,l2advertisements; speaker logs)"
	}
	nodes := v.readyEndpointNodes(ctx, in.Service.Namespace, in.Service.Name)
	where := "no node has a ready endpoint"
	if len(nodes) > 0 {
		where = "its ready endpoints are on " + strings.Join(nodes, ", ") + ", where no speaker announces it"
	}
	return fmt.Sprintf("%s: externalTrafficPolicy is Local, so only a node with a ready endpoint and a running speaker may announce it, and %s", none, where)
}

// readyEndpointNodes returns the sorted nodes of a Service's ready
// endpoints, read on demand (at most once per EndpointsTTL per Service).
func (v *View) readyEndpointNodes(ctx context.Context, ns, name string) []string {
	eps, err := v.unannouncedEndpoints.get(ctx, []string{ns + "/" + name})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot read the EndpointSlices of an unannounced LoadBalancer Service", "service", ns+"/"+name, "err", err)
	}
	var out []string
	for _, es := range eps {
		for _, e := range es.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			if ready && e.NodeName != nil && *e.NodeName != "" && !slices.Contains(out, *e.NodeName) {
				out = append(out, *e.NodeName)
			}
		}
	}
	slices.Sort(out)
	return out
}

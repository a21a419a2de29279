// SPDX-License-Identifier: Apache-2.0

package ipvscheck

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// Cluster is what the checks read from the API server.
type Cluster interface {
	// Services lists every Service. Callers must not modify them (the
	// agent serves its informer cache's objects, not copies).
	Services(ctx context.Context) ([]*corev1.Service, error)
	// EndpointSlices lists every EndpointSlice, read-only as Services.
	EndpointSlices(ctx context.Context) ([]*discoveryv1.EndpointSlice, error)
}

// NewCluster returns a Cluster that lists through cs.
func NewCluster(cs kube.Interface) Cluster { return clientCluster{cs: cs} }

type clientCluster struct{ cs kube.Interface }

func (c clientCluster) Services(ctx context.Context) ([]*corev1.Service, error) {
	l, err := c.cs.Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	return pointers(l.Items), nil
}

func (c clientCluster) EndpointSlices(ctx context.Context) ([]*discoveryv1.EndpointSlice, error) {
	l, err := c.cs.EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing EndpointSlices: %w", err)
	}
	return pointers(l.Items), nil
}

// pointers returns a pointer to each element of items.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// LoadBalancerIPs returns a function listing every Service's LoadBalancer
// ingress IPs (for the arp-sysctls check).
func LoadBalancerIPs(c Cluster) func(ctx context.Context) ([]netip.Addr, error) {
	return func(ctx context.Context) ([]netip.Addr, error) {
		svcs, err := c.Services(ctx)
		if err != nil {
			return nil, err
		}
		var out []netip.Addr
		for _, s := range svcs {
			if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
				continue
			}
			for _, ing := range s.Status.LoadBalancer.Ingress {
				if a, err := netip.ParseAddr(ing.IP); err == nil {
					out = append(out, a.Unmap())
				}
			}
		}
		return out, nil
	}
}

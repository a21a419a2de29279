// SPDX-License-Identifier: Apache-2.0

package ipvscheck

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// Cluster is what the checks read from the API server.
type Cluster interface {
	// Services lists every Service. Callers must not modify them (the
	// agent serves its informer cache's objects, not copies).
	Services(ctx context.Context) ([]*corev1.Service, error)
	// EndpointSlices returns the EndpointSlices kube-proxy programs
	// (ProxiedEndpointSlices) of the given Services ("namespace/name"),
	// read-only as Services; it may return others too. The check asks only
	// for the Services whose virtual servers have no real servers: no
	// caller needs every EndpointSlice in the cluster. The check calls it on
	// every run, with no name when it needs none: that must cost nothing.
	EndpointSlices(ctx context.Context, services []string) ([]*discoveryv1.EndpointSlice, error)
}

// ProxiedEndpointSlices selects the EndpointSlices kube-proxy programs, as
// kube-proxy's own informers do: not those of headless Services (no virtual
// server) nor of Services another proxy serves.
const ProxiedEndpointSlices = "!" + corev1.IsHeadlessService + ",!" + ServiceProxyNameLabel

// servicesPerList bounds how many Service names one LIST's label selector
// carries (its URL stays a few KiB).
const servicesPerList = 50

// ListEndpointSlices lists the proxied EndpointSlices of the given Services
// ("namespace/name"): one LIST across namespaces per servicesPerList names
// (label selector kubernetes.io/service-name in (…)), keeping only the
// slices of the Services asked for.
func ListEndpointSlices(ctx context.Context, cs kube.Interface, services []string) ([]*discoveryv1.EndpointSlice, error) {
	base, err := labels.Parse(ProxiedEndpointSlices)
	if err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(services))
	byName := map[string]bool{}
	for _, s := range services {
		want[s] = true
		if _, name, ok := strings.Cut(s, "/"); ok {
			byName[name] = true
		}
	}
	names := slices.Sorted(maps.Keys(byName))
	var out []*discoveryv1.EndpointSlice
	for chunk := range slices.Chunk(names, servicesPerList) {
		req, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.In, chunk)
		if err != nil {
			return nil, fmt.Errorf("selecting the EndpointSlices of %v: %w", chunk, err)
		}
		l, err := cs.EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: base.Add(*req).String()})
		if err != nil {
			return nil, fmt.Errorf("listing EndpointSlices: %w", err)
		}
		for i := range l.Items {
			es := &l.Items[i]
			if want[es.Namespace+"/"+es.Labels[discoveryv1.LabelServiceName]] {
				out = append(out, es)
			}
		}
	}
	return out, nil
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

func (c clientCluster) EndpointSlices(ctx context.Context, services []string) ([]*discoveryv1.EndpointSlice, error) {
	return ListEndpointSlices(ctx, c.cs, services)
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

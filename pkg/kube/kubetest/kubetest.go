// SPDX-License-Identifier: Apache-2.0

// Package kubetest serves kube.Interface from a client-go clientset, for
// tests: client-go's fake clientset (an object tracker with watches) or a
// clientset of a test API server. Only tests may import it: it links
// client-go's full clientset, which the ipvs-guard binary leaves out.
package kubetest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// FromClientset returns cs as a kube.Interface.
func FromClientset(cs kubernetes.Interface) kube.Interface { return clientset{cs} }

type clientset struct{ cs kubernetes.Interface }

func (c clientset) Services(ns string) kube.ServiceInterface { return c.cs.CoreV1().Services(ns) }
func (c clientset) EndpointSlices(ns string) kube.EndpointSliceInterface {
	return c.cs.DiscoveryV1().EndpointSlices(ns)
}
func (c clientset) ConfigMaps(ns string) kube.ConfigMapInterface { return c.cs.CoreV1().ConfigMaps(ns) }
func (c clientset) Nodes() kube.NodeInterface                    { return c.cs.CoreV1().Nodes() }
func (c clientset) Events(ns string) kube.EventInterface         { return c.cs.EventsV1().Events(ns) }

func (c clientset) ServerResourcesForGroupVersion(_ context.Context, gv string) (*metav1.APIResourceList, error) {
	return c.cs.Discovery().ServerResourcesForGroupVersion(gv) //nolint:wrapcheck // as the clientset returns it
}

// IsWatchListSemanticsUnSupported tells informers whether cs streams the
// initial list in a watch (client-go's fake clientset does not).
func (c clientset) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.cs)
}

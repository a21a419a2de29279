// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// EndpointsTTL is how long the agent reuses the EndpointSlices it read for
// a Service. The agent watches no EndpointSlice: only two verdicts depend
// on endpoints, and both only for a few Services at a time.
//
//   - The ipvs check asks for the Services of virtual servers that have had
//     no real servers for the settle grace (a virtual server with real
//     servers is fine whatever its endpoints say): in a healthy cluster,
//     the Services without ready endpoints.
//   - A LoadBalancer IP nobody announces, with externalTrafficPolicy Local,
//     names the nodes of its ready endpoints in its problem message.
//
// Per agent per hour that is at most 60/TTL·⌈Z/50⌉ LISTs (Z: Services with
// an empty virtual server, 50 names per label selector) plus one per
// Service that newly lost its real servers, where a watch of every
// EndpointSlice receives every endpoint change in the cluster (kube-proxy
// receives those already; the agent need not). The cost of the TTL: a
// Service whose endpoints become ready while kube-proxy fails to program
// them is reported up to one TTL later than with a watch (a Service that
// newly loses its real servers is read on the check's next ask: the ipvs
// check's reader forgets the Services it no longer asks for).
const EndpointsTTL = 5 * time.Minute

// endpointsOnDemand reads the EndpointSlices of named Services when a check
// needs them and keeps each answer for EndpointsTTL. Safe for concurrent
// use.
type endpointsOnDemand struct {
	client kube.Interface
	clock  clock.PassiveClock
	ttl    time.Duration
	// current makes each get forget the Services it was not asked for:
	// the ipvs check asks for every Service it needs on every run, so a
	// Service that got real servers and lost them again is read afresh.
	current bool

	// mu guards memo.
	mu   sync.Mutex
	memo map[string]endpointsEntry // "namespace/name"
}

type endpointsEntry struct {
	slices []*discoveryv1.EndpointSlice
	read   time.Time
}

func newEndpointsOnDemand(client kube.Interface, current bool) *endpointsOnDemand {
	return &endpointsOnDemand{client: client, clock: clock.RealClock{}, ttl: EndpointsTTL, current: current, memo: map[string]endpointsEntry{}}
}

// get returns the EndpointSlices of services ("namespace/name"), reading
// those without a fresh answer in one LIST per 50 names. When the read
// fails it serves what it has, however old, and the error. Answers older
// than the TTL (and, with current, answers for Services not asked for) are
// dropped on the way.
func (e *endpointsOnDemand) get(ctx context.Context, services []string) ([]*discoveryv1.EndpointSlice, error) {
	now := e.clock.Now()
	e.mu.Lock()
	var stale []string
	for _, s := range services {
		if m, ok := e.memo[s]; !ok || now.Sub(m.read) >= e.ttl {
			stale = append(stale, s)
		}
	}
	e.mu.Unlock()
	var err error
	if len(stale) > 0 {
		var got []*discoveryv1.EndpointSlice
		if got, err = ipvscheck.ListEndpointSlices(ctx, e.client, stale); err == nil {
			fresh := make(map[string][]*discoveryv1.EndpointSlice, len(stale))
			for _, s := range stale {
				fresh[s] = nil
			}
			for _, es := range got {
				k := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
				stripped, _ := stripEndpointSlice(es)
				fresh[k] = append(fresh[k], stripped.(*discoveryv1.EndpointSlice))
			}
			e.mu.Lock()
			for k, sl := range fresh {
				e.memo[k] = endpointsEntry{slices: sl, read: now}
			}
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*discoveryv1.EndpointSlice
	asked := make(map[string]bool, len(services))
	for _, s := range services {
		out = append(out, e.memo[s].slices...)
		asked[s] = true
	}
	for k, m := range e.memo {
		if !asked[k] && (e.current || now.Sub(m.read) >= e.ttl) {
			delete(e.memo, k)
		}
	}
	return out, err
}

// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// FullComparisonPeriod is how often the agent reads every proxied
// EndpointSlice to compare every Service's real servers (docs/scale.md):
// 12 full reads an hour.
const FullComparisonPeriod = 5 * time.Minute

// PageSize is how many EndpointSlices one LIST page carries: 500, as
// client-go's pager and kubectl do; 10 pages for 5,000 Services.
const PageSize = 500

// Reads counts the reader's LIST requests, for tests and the scale bench.
type Reads struct {
	// FullPages are the pages of full reads.
	FullPages int
	// Confirmations are the LISTs that re-read named Services.
	Confirmations int
}

// EndpointReader reads EndpointSlices for the comparison: every proxied one
// at most once per Period (LISTs of PageSize across namespaces with
// kube-proxy's label selector, served from the API server's watch cache), and the slices
// of named Services when a finding needs confirming (50 names a LIST). It
// keeps a summary of each slice, never the objects. Safe for concurrent
// use.
type EndpointReader struct {
	client kube.Interface
	period time.Duration
	clock  clock.PassiveClock

	// mu guards the fields below.
	mu     sync.Mutex
	all    ServiceEndpoints
	readAt time.Time
	reads  Reads
}

// NewEndpointReader returns a reader over client that reads everything
// again once its last full read is period old (0: on every call, as a
// one-shot diagnose wants).
func NewEndpointReader(client kube.Interface, period time.Duration) *EndpointReader {
	return &EndpointReader{client: client, period: period, clock: clock.RealClock{}}
}

// Reads returns how many LISTs the reader has sent.
func (r *EndpointReader) Reads() Reads {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// All returns the endpoints of every proxied Service and when they were
// read; it reads them again when the last read is a period old. On a read
// error it returns the last good read, if any, with the error.
func (r *EndpointReader) All(ctx context.Context) (ServiceEndpoints, time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	if r.all != nil && r.period > 0 && now.Sub(r.readAt) < r.period {
		return r.all, r.readAt, nil
	}
	got, pages, err := listAll(ctx, r.client)
	r.reads.FullPages += pages
	if err != nil {
		return r.all, r.readAt, err
	}
	r.all, r.readAt = got, now
	return r.all, r.readAt, nil
}

// Of reads the endpoints of the named Services ("namespace/name") now;
// every one asked for is in the answer (empty when it has no slice).
func (r *EndpointReader) Of(ctx context.Context, services []string) (ServiceEndpoints, error) {
	if len(services) == 0 {
		return ServiceEndpoints{}, nil
	}
	eps, err := ipvscheck.ListEndpointSlices(ctx, r.client, services)
	r.mu.Lock()
	r.reads.Confirmations += (len(services) + 49) / 50
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := Summarize(eps)
	for _, s := range services {
		out.Set(s)
	}
	return out, nil
}

// listAll reads every proxied EndpointSlice in pages of PageSize: a
// consistent read, which kube-apiserver serves from its watch cache, page by
// page (consistent reads from the cache: beta from 1.31, on by default).
// resourceVersion "0" is served from the cache too, but kube-apiserver 1.37
// ignores the limit then and answers with every slice at once: 19 MiB
// allocated by the agent for 5,000 Services, against its 50 MiB budget,
// where a page of 500 costs about 2 MiB (docs/scale.md).
func listAll(ctx context.Context, cs kube.Interface) (ServiceEndpoints, int, error) {
	out := ServiceEndpoints{}
	opts := metav1.ListOptions{LabelSelector: ipvscheck.ProxiedEndpointSlices, Limit: PageSize}
	pages := 0
	for {
		l, err := cs.EndpointSlices(metav1.NamespaceAll).List(ctx, opts)
		pages++
		if err != nil {
			return nil, pages, fmt.Errorf("listing EndpointSlices (page %d): %w", pages, err)
		}
		for i := range l.Items {
			out.Add(&l.Items[i])
		}
		if l.Continue == "" {
			return out, pages, nil
		}
		opts = metav1.ListOptions{LabelSelector: ipvscheck.ProxiedEndpointSlices, Limit: PageSize, Continue: l.Continue}
	}
}

// overlay returns base with the Services of fresh replaced.
func overlay(base, fresh ServiceEndpoints) ServiceEndpoints {
	if len(fresh) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = ServiceEndpoints{}
	}
	maps.Copy(out, fresh)
	return out
}

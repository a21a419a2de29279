// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"context"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// EndpointView is what a checker comparing a kernel table with the cluster
// keeps between runs over the shared EndpointReader: the reads of named
// Services laid over the full read they are newer than, and when each
// finding was last confirmed by such a read. ipvs-dataplane and
// nftables-dataplane keep one each over the same reader, so the full read
// is shared and each confirms only its own findings. Callers serialise
// its use.
type EndpointView struct {
	src Endpoints
	// snapAt is the read time of the full read fresh is laid over.
	snapAt time.Time
	// fresh are the Services read since that full read.
	fresh ServiceEndpoints
	// confirmedAt is when each finding (by key) was last confirmed.
	confirmedAt map[string]time.Time
}

// NewEndpointView returns a view over src.
func NewEndpointView(src Endpoints) *EndpointView {
	return &EndpointView{src: src, fresh: ServiceEndpoints{}, confirmedAt: map[string]time.Time{}}
}

// Current returns the full read with the Services read since laid over it;
// nil (and the error) when there is no full read.
func (v *EndpointView) Current(ctx context.Context) (ServiceEndpoints, error) {
	all, at, err := v.src.All(ctx)
	if !at.Equal(v.snapAt) {
		v.snapAt, v.fresh = at, ServiceEndpoints{}
	}
	if all == nil {
		return nil, err
	}
	return overlay(all, v.fresh), err
}

// Read reads the named Services now and returns cur with them laid over
// it; the answers stand until the next full read.
func (v *EndpointView) Read(ctx context.Context, cur ServiceEndpoints, names []string) (ServiceEndpoints, error) {
	got, err := v.src.Of(ctx, names)
	if err != nil {
		return cur, err
	}
	maps.Copy(v.fresh, got)
	return overlay(cur, got), nil
}

// confirmTTL is how long a confirming read of a Service stands in for the
// full read: a problem that persists is re-read at most this often.
const confirmTTL = FullComparisonPeriod

// Confirm re-reads the Services of findings that depend on endpoints
// (service(f) not empty) and were not confirmed within confirmTTL, lays the
// answers over cur, compares again and keeps the findings that still hold:
// a Service whose pods changed since the full read is never reported from
// the old read. A finding confirmed stays reported while it persists, and
// is read again every confirmTTL. A failed read keeps the findings that
// needed it back.
func Confirm[F any](ctx context.Context, v *EndpointView, logger klog.Logger, cur ServiceEndpoints, found []F, now time.Time,
	key, service func(F) string, compare func(ServiceEndpoints) []F) []F {
	need := map[string]bool{}
	present := map[string]bool{}
	for _, f := range found {
		if service(f) == "" {
			continue
		}
		present[key(f)] = true
		if at, ok := v.confirmedAt[key(f)]; !ok || now.Sub(at) >= confirmTTL {
			need[service(f)] = true
		}
	}
	for k := range v.confirmedAt {
		if !present[k] {
			delete(v.confirmedAt, k)
		}
	}
	if len(need) == 0 {
		return found
	}
	names := slices.Sorted(maps.Keys(need))
	eps, err := v.Read(ctx, cur, names)
	if err != nil {
		logger.Info("Cannot re-read the EndpointSlices of Services with findings; not reporting them yet", "services", len(names), "err", err)
		out := found[:0:0]
		for _, f := range found {
			if !need[service(f)] {
				out = append(out, f)
			}
		}
		return out
	}
	still := map[string]bool{}
	for _, f := range compare(eps) {
		still[key(f)] = true
	}
	out := found[:0:0]
	for _, f := range found {
		if !still[key(f)] {
			delete(v.confirmedAt, key(f))
			continue
		}
		if need[service(f)] {
			v.confirmedAt[key(f)] = now
		}
		out = append(out, f)
	}
	return out
}

// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListWatcher lists and watches one resource: a typed client of this
// package, a metadata or dynamic client's resource interface, or a typed
// client of client-go in tests.
type ListWatcher[L runtime.Object] interface {
	// List lists the objects opts selects.
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	// Watch watches the objects opts selects.
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// InformerOptions tune NewInformer.
type InformerOptions struct {
	// Tweak edits every list and watch request (label and field selectors).
	Tweak func(*metav1.ListOptions)
	// Transform replaces each object before it is cached (cache.TransformFunc).
	Transform cache.TransformFunc
	// Indexers are the cache's indexes; none by default (ipvs-guard lists
	// every object or gets one by key, and an index costs a map entry per
	// object).
	Indexers cache.Indexers
	// Client is what the API calls go through, asked whether it supports
	// watch-list semantics (client-go's fakes do not); nil assumes it does.
	Client any
}

// NewInformer returns a shared informer over lw's objects (example is one
// of them, e.g. &corev1.Service{}), as client-go's generated informers
// build them, without a resync period.
func NewInformer[L runtime.Object](lw ListWatcher[L], example runtime.Object, opts InformerOptions) cache.SharedIndexInformer {
	tweak := func(o *metav1.ListOptions) {
		if opts.Tweak != nil {
			opts.Tweak(o)
		}
	}
	indexers := opts.Indexers
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	inf := cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				tweak(&o)
				return lw.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				tweak(&o)
				return lw.Watch(ctx, o)
			},
		}, opts.Client),
		example,
		cache.SharedIndexInformerOptions{Indexers: indexers},
	)
	if opts.Transform != nil {
		// SetTransform fails only once the informer runs.
		_ = inf.SetTransform(opts.Transform)
	}
	return inf
}

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// StartL2 starts the ServiceL2Status informer once discovery shows MetalLB's
// CRD (it may be installed after the agent starts, so callers retry on each
// resync); onChange, when not nil, is called on every change. It is a no-op
// once the informer runs or when the view has no dynamic client. The
// discovery read takes DiscoveryTimeout at most; the informer runs until
// ctx ends.
func (v *View) StartL2(ctx context.Context, onChange func()) {
	if v.dyn == nil {
		return
	}
	v.l2StartMu.Lock()
	defer v.l2StartMu.Unlock()
	if v.HasServiceL2Status() {
		return
	}
	// Bounded (DiscoveryTimeout): the agent's rest config sets no request
	// timeout, since its watches must outlive any.
	dctx, cancel := context.WithTimeout(ctx, v.discoveryTimeout)
	list, err := v.client.ServerResourcesForGroupVersion(dctx, ServiceL2StatusGVR.GroupVersion().String())
	cancel()
	if err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).V(2).Info("Cannot discover MetalLB ServiceL2Status yet", "err", err)
		}
		return
	}
	found := false
	for _, r := range list.APIResources {
		if r.Name == ServiceL2StatusGVR.Resource {
			found = true
		}
	}
	if !found {
		return
	}
	inf := kube.NewInformer(v.dyn.Resource(ServiceL2StatusGVR).Namespace(metav1.NamespaceAll), &unstructured.Unstructured{},
		kube.InformerOptions{Transform: stripManagedFields, Client: v.dyn})
	if onChange != nil {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { onChange() },
			UpdateFunc: func(any, any) { onChange() },
			DeleteFunc: func(any) { onChange() },
		})
	}
	v.setL2(cache.NewGenericLister(inf.GetIndexer(), ServiceL2StatusGVR.GroupResource()), inf.HasSynced)
	v.informers.add(inf)
	v.informers.start(ctx.Done())
	klog.FromContext(ctx).Info("Watching MetalLB ServiceL2Status")
}

// Sync fills the view once for a one-shot caller such as `diagnose`: it
// starts the informers (stopped when ctx ends), looks for MetalLB's
// ServiceL2Status, and waits until every cache holds its first list.
func (v *View) Sync(ctx context.Context) error {
	v.Start(ctx.Done())
	v.StartL2(ctx, nil)
	if !cache.WaitForCacheSync(ctx.Done(), v.HasSynced) {
		return fmt.Errorf("listing Services, Nodes and ServiceL2Statuses: %w", context.Cause(ctx))
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package apiservertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// Apply server-side-applies every object of the given multi-document YAML
// files as the admin, in file order.
func (s *Server) Apply(ctx context.Context, files ...string) error {
	cfg := s.AdminConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s: mapping %s: %w", f, gvk, err)
			}
			body, err := u.MarshalJSON()
			if err != nil {
				return err
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if u.GetNamespace() != "" {
				ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
			}
			force := true
			if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body,
				metav1.PatchOptions{FieldManager: "apiservertest", Force: &force}); err != nil {
				return fmt.Errorf("%s: applying %s %s: %w", f, gvk.Kind, u.GetName(), err)
			}
		}
	}
	return nil
}

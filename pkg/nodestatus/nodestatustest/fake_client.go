// SPDX-License-Identifier: Apache-2.0

package nodestatustest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// FakeClient is an in-memory nodestatus.Client for tests. It applies patches the way
// the API server does (strategic merge for status, JSON merge for metadata,
// resourceVersion as a precondition) and records every call.
type FakeClient struct {
	// mu guards every field below.
	mu sync.Mutex
	// node is the stored Node.
	node *corev1.Node
	// statusPatches and metadataPatches record every patch body received.
	statusPatches, metadataPatches [][]byte
	gets                           int
	errs                           []error
	// beforePatch, when set, runs (under mu) before a status patch is applied.
	beforePatch func(n *corev1.Node) bool
}

var _ nodestatus.Client = (*FakeClient)(nil)

// NewFakeClient returns a FakeClient storing a copy of node.
func NewFakeClient(node *corev1.Node) *FakeClient {
	n := node.DeepCopy()
	if n.ResourceVersion == "" {
		n.ResourceVersion = "1"
	}
	return &FakeClient{node: n}
}

// Node returns a copy of the stored Node.
func (f *FakeClient) Node() *corev1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.node.DeepCopy()
}

// StatusPatches returns the status patch bodies received so far.
func (f *FakeClient) StatusPatches() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.statusPatches...)
}

// MetadataPatches returns the metadata patch bodies received so far.
func (f *FakeClient) MetadataPatches() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.metadataPatches...)
}

// Gets returns how many times GetNode was called.
func (f *FakeClient) Gets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

// InjectErrors makes the next calls fail with errs, one per call, in order.
func (f *FakeClient) InjectErrors(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, errs...)
}

// BeforeStatusPatch sets a hook run on the stored Node before each status
// patch is applied, to simulate a concurrent writer; when it returns true the
// Node's resourceVersion is bumped as for a write.
func (f *FakeClient) BeforeStatusPatch(hook func(n *corev1.Node) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beforePatch = hook
}

// Modify changes the stored Node as another writer would (bumping its resourceVersion).
func (f *FakeClient) Modify(fn func(n *corev1.Node)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.node)
	f.bump()
}

func (f *FakeClient) bump() {
	rv, _ := strconv.Atoi(f.node.ResourceVersion)
	f.node.ResourceVersion = strconv.Itoa(rv + 1)
}

func (f *FakeClient) nextErr() error {
	if len(f.errs) == 0 {
		return nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

// GetNode implements nodestatus.Client.
func (f *FakeClient) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	if err := f.nextErr(); err != nil {
		return nil, err
	}
	if name != f.node.Name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	return f.node.DeepCopy(), nil
}

// PatchNodeStatus implements nodestatus.Client.
func (f *FakeClient) PatchNodeStatus(_ context.Context, name string, patch []byte) (*corev1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusPatches = append(f.statusPatches, patch)
	if err := f.nextErr(); err != nil {
		return nil, err
	}
	if f.beforePatch != nil && f.beforePatch(f.node) {
		f.bump()
	}
	return f.apply(name, patch, func(orig []byte) ([]byte, error) {
		return strategicpatch.StrategicMergePatch(orig, patch, corev1.Node{})
	})
}

// PatchNodeMetadata implements nodestatus.Client.
func (f *FakeClient) PatchNodeMetadata(_ context.Context, name string, patch []byte) (*corev1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metadataPatches = append(f.metadataPatches, patch)
	if err := f.nextErr(); err != nil {
		return nil, err
	}
	return f.apply(name, patch, func(orig []byte) ([]byte, error) {
		return jsonpatch.MergePatch(orig, patch)
	})
}

func (f *FakeClient) apply(name string, patch []byte, merge func([]byte) ([]byte, error)) (*corev1.Node, error) {
	if name != f.node.Name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	var pre struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &pre); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding patch: %v", err))
	}
	if pre.Metadata.ResourceVersion != "" && pre.Metadata.ResourceVersion != f.node.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, name,
			fmt.Errorf("resourceVersion %s is not %s", pre.Metadata.ResourceVersion, f.node.ResourceVersion))
	}
	orig, err := json.Marshal(f.node)
	if err != nil {
		return nil, err
	}
	merged, err := merge(orig)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("applying patch: %v", err))
	}
	var out corev1.Node
	if err := json.Unmarshal(merged, &out); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding patched node: %v", err))
	}
	out.ResourceVersion = f.node.ResourceVersion
	f.node = &out
	f.bump()
	return f.node.DeepCopy(), nil
}

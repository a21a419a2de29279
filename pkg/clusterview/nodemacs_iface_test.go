// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// annotatedNodes serves Node metadata with the given annotations per node.
type annotatedNodes map[string]map[string]string

func (a annotatedNodes) Get(_ context.Context, name string, _ metav1.GetOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	ann, ok := a[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}, nil
}

func (a annotatedNodes) List(context.Context, metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	out := &metav1.PartialObjectMetadataList{}
	for n, ann := range a {
		out.Items = append(out.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: n, Annotations: ann}})
	}
	return out, nil
}

// TestMACDirectoryInterfaces checks that the directory names the interface
// behind a MAC and whether it is down, from both annotations; that a MAC
// also published by an interface that is up (a VLAN on a down parent) is
// not down; and that a node without the down annotation (an older agent)
// still has its MACs named.
func TestMACDirectoryInterfaces(t *testing.T) {
	nodes := annotatedNodes{
		"a": {
			nodestatus.MACsAnnotation:     `{"eth0":"02:00:00:00:00:0a","eth0.100":"02:00:00:00:01:0a"}`,
			nodestatus.DownMACsAnnotation: `{"eth1":"02:00:00:00:02:0A","eth2":"02:00:00:00:01:0a"}`,
		},
		"b": {nodestatus.MACsAnnotation: `{"eth0":"02:00:00:00:00:0b"}`},
		"c": {nodestatus.MACsAnnotation: `{"eth0":"02:00:00:00:00:0c"}`, nodestatus.DownMACsAnnotation: `not json`},
	}
	tests := []struct {
		mac             string
		node, iface     string
		down, ok        bool
		announcerMACsOf string
	}{
		{mac: "02:00:00:00:00:0a", node: "a", iface: "eth0", ok: true},
		{mac: "02:00:00:00:02:0a", node: "a", iface: "eth1", down: true, ok: true},
		{mac: "02:00:00:00:01:0a", node: "a", iface: "eth0.100", ok: true},
		{mac: "02:00:00:00:00:0b", node: "b", iface: "eth0", ok: true},
		{mac: "02:00:00:00:00:0c", node: "c", iface: "eth0", ok: true},
		{mac: "02:00:00:00:09:09"},
	}
	d := newMACDirectory(nodes)
	d.now = func() time.Time { return time.Unix(1_000_000, 0) }
	for _, tt := range tests {
		node, iface, down, ok := d.InterfaceForMAC(context.Background(), mac(t, tt.mac), true)
		if node != tt.node || iface != tt.iface || down != tt.down || ok != tt.ok {
			t.Errorf("%s: got (%q, %q, down %v, %v), want (%q, %q, down %v, %v)", tt.mac, node, iface, down, ok, tt.node, tt.iface, tt.down, tt.ok)
		}
	}
	// A down interface's MAC is not among the MACs a node answers with.
	for _, m := range d.NodeMACs(context.Background(), "a", false) {
		if m.String() == "02:00:00:00:02:0a" {
			t.Errorf("node a's MACs include its down interface's: %v", d.NodeMACs(context.Background(), "a", false))
		}
	}
}

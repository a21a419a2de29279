// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// fakeNodeMeta serves Node metadata from annotations (node → MACs JSON)
// and counts the requests.
type fakeNodeMeta struct {
	macs        map[string]string
	gets, lists int
	pages       int
}

func (f *fakeNodeMeta) Get(_ context.Context, name string, _ metav1.GetOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	f.gets++
	v, ok := f.macs[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{nodestatus.MACsAnnotation: v}}}, nil
}

func (f *fakeNodeMeta) List(_ context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	if o.Continue == "" {
		f.lists++
	}
	f.pages++
	var names []string
	for n := range f.macs {
		names = append(names, n)
	}
	sort.Strings(names)
	start, _ := strconv.Atoi(o.Continue)
	end := min(len(names), start+int(o.Limit))
	out := &metav1.PartialObjectMetadataList{}
	for _, n := range names[start:end] {
		out.Items = append(out.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: n, Annotations: map[string]string{nodestatus.MACsAnnotation: f.macs[n]}}})
	}
	if end < len(names) {
		out.Continue = strconv.Itoa(end)
	}
	return out, nil
}

func mac(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMACDirectoryReads checks when the directory reads the API: one GET
// per announcer per TTL, a fresh re-read at most every macReread, a LIST
// for an unknown MAC at most once per macListInterval and not again for the
// same MAC within macUnknownTTL, and a LIST instead of GETs beyond the budget.
func TestMACDirectoryReads(t *testing.T) {
	ctx := context.Background()
	f := &fakeNodeMeta{macs: map[string]string{
		"a": `{"eth0":"02:00:00:00:00:0a"}`,
		"b": `{"eth0":"02:00:00:00:00:0B","eth1":"02:00:00:00:01:0b"}`,
		"c": `not json`,
	}}
	now := time.Unix(1_000_000, 0)
	d := newMACDirectory(f)
	d.now = func() time.Time { return now }
	step := func(dt time.Duration) { now = now.Add(dt) }
	want := func(what string, gets, lists int) {
		t.Helper()
		if f.gets != gets || f.lists != lists {
			t.Errorf("%s: %d GETs, %d LISTs; want %d, %d", what, f.gets, f.lists, gets, lists)
		}
	}

	if got := d.NodeMACs(ctx, "b", false); fmt.Sprint(got) != "[02:00:00:00:00:0b 02:00:00:00:01:0b]" {
		t.Errorf("NodeMACs(b) = %v", got)
	}
	d.NodeMACs(ctx, "b", false)
	want("b twice", 1, 0)
	if n, ok := d.NodeForMAC(ctx, mac(t, "02:00:00:00:01:0B"), false); !ok || n != "b" {
		t.Errorf("NodeForMAC of b's eth1 = %q %v", n, ok)
	}
	d.NodeMACs(ctx, "b", true)
	want("fresh right after a read", 1, 0)
	step(macReread)
	d.NodeMACs(ctx, "b", true)
	want("fresh after macReread", 2, 0)
	if got := d.NodeMACs(ctx, "c", false); got != nil {
		t.Errorf("NodeMACs(c), malformed = %v", got)
	}
	if got := d.NodeMACs(ctx, "gone", false); got != nil {
		t.Errorf("NodeMACs(gone) = %v", got)
	}
	want("c and a missing node", 4, 0)
	d.NodeMACs(ctx, "gone", false)
	want("a missing node again", 4, 0)

	// An unknown MAC: named without lookup from what was read (nothing),
	// with lookup by one LIST; a foreign MAC is not looked up again soon.
	if _, ok := d.NodeForMAC(ctx, mac(t, "02:00:00:00:00:0a"), false); ok {
		t.Error("a's MAC named before anything read it")
	}
	want("no lookup", 4, 0)
	if n, ok := d.NodeForMAC(ctx, mac(t, "02:00:00:00:00:0a"), true); !ok || n != "a" {
		t.Errorf("NodeForMAC(a's MAC, lookup) = %q %v", n, ok)
	}
	want("lookup", 4, 1)
	foreign := mac(t, "02:00:00:00:00:ff")
	for range 3 {
		if _, ok := d.NodeForMAC(ctx, foreign, true); ok {
			t.Error("a foreign MAC named")
		}
	}
	want("foreign MAC within the list interval", 4, 1)
	step(macListInterval)
	d.NodeForMAC(ctx, foreign, true)
	want("foreign MAC after the list interval: known unknown", 4, 1)
	step(macUnknownTTL)
	d.NodeForMAC(ctx, foreign, true)
	want("foreign MAC after macUnknownTTL", 4, 2)
	// The LIST read every node: no GET for a within the TTL.
	d.NodeMACs(ctx, "a", false)
	want("a after the LIST", 4, 2)
	step(macTTL)
	d.NodeMACs(ctx, "a", false)
	want("a after the TTL", 5, 2)

	// A MAC that moves to another node is named after the next read.
	f.macs["a"] = `{"eth0":"02:00:00:00:00:0c"}`
	f.macs["new"] = `{"eth0":"02:00:00:00:00:0a"}`
	step(macTTL)
	d.NodeMACs(ctx, "a", false)
	if _, ok := d.NodeForMAC(ctx, mac(t, "02:00:00:00:00:0a"), false); ok {
		t.Error("a's old MAC still named a")
	}
	step(macUnknownTTL)
	if n, ok := d.NodeForMAC(ctx, mac(t, "02:00:00:00:00:0a"), true); !ok || n != "new" {
		t.Errorf("moved MAC named %q %v, want new", n, ok)
	}

	// Many announcers at once: macGetBudget GETs a minute, then one LIST
	// (in pages) for the rest.
	f2 := &fakeNodeMeta{macs: map[string]string{}}
	for i := range 1200 {
		f2.macs[fmt.Sprintf("n%04d", i)] = fmt.Sprintf(`{"eth0":"02:00:00:00:%02x:%02x"}`, i>>8, i&0xff)
	}
	d2 := newMACDirectory(f2)
	for i := range 1200 {
		if got := d2.NodeMACs(ctx, fmt.Sprintf("n%04d", i), false); len(got) != 1 {
			t.Fatalf("n%04d: %v", i, got)
		}
	}
	if f2.gets != macGetBudget || f2.lists != 1 || f2.pages != 3 {
		t.Errorf("1,200 announcers: %d GETs, %d LISTs in %d pages; want %d, 1, 3", f2.gets, f2.lists, f2.pages, macGetBudget)
	}
}

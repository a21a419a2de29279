// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// How the MAC directory reads Node annotations on demand. Per agent and
// hour it makes at most
//
//	GETs  ≤ 2·A + 120·P   (1 h / macTTL, 1 h / macReread; at most macGetBudget a minute)
//	LISTs ≤ 2·U, at most 60   (1 h / macUnknownTTL, 1 h / macListInterval)
//
// where A is the number of distinct announcing nodes of the IPs it probes
// that answered (≤ k × LoadBalancer IPs / N with sharding), P the announcers
// whose IPs a MAC they did not publish answers (a problem), and U the
// distinct MACs that answer and no Node publishes (a foreign responder, or
// an announcer without ipvs-guard). Nothing grows with the number of nodes.
const (
	// macTTL is how long a node's MACs read from its Node are trusted.
	macTTL = 30 * time.Minute
	// macReread is the least time between two reads of one node's MACs
	// when a reply disagrees with them.
	macReread = 30 * time.Second
	// macListInterval is the least time between two LISTs of every Node.
	macListInterval = time.Minute
	// macUnknownTTL is how long a MAC that no Node published is not looked
	// up again.
	macUnknownTTL = 30 * time.Minute
	// macGetBudget is how many Node GETs a minute the directory makes; a
	// miss beyond it reads every Node with one LIST instead (a one-shot
	// diagnose probing every IP, an agent's first run).
	macGetBudget = 16
	// macListPage is the page size of that LIST.
	macListPage = 500
)

// nodeMetadataClient reads Nodes' metadata (PartialObjectMetadata): the
// metadata client's Nodes resource.
type nodeMetadataClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions, subresources ...string) (*metav1.PartialObjectMetadata, error)
	List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)
}

// macOwner is a node interface that published a MAC, and whether it is down.
type macOwner struct {
	node, iface string
	down        bool
}

// nodeMACs is what one node published, and when it was read.
type nodeMACs struct {
	macs map[string]string // interface → lower-case MAC
	down map[string]string // down interface → lower-case MAC
	read time.Time
}

// publishedMACs is what one Node's annotations say.
type publishedMACs struct{ up, down map[string]string }

// macDirectory names ARP responders from the MACs each agent publishes on its
// own Node (nodestatus.MACsAnnotation), reading Node metadata only when a probe needs
// it: the announcer's MACs once an IP answered, and every Node when a MAC
// nobody is known to own answers. No Node is watched, so kubelets' status
// reports cost the agent nothing. Safe for concurrent use; the API is read
// outside the lock.
type macDirectory struct {
	client nodeMetadataClient // nil: names nothing
	now    func() time.Time

	mu       sync.Mutex
	nodes    map[string]nodeMACs
	byMAC    map[string]macOwner
	unknown  map[string]time.Time // MAC → when a LIST did not find it
	lastList time.Time            // last LIST tried
	listed   time.Time            // last LIST that succeeded
	gets     []time.Time          // GETs of the last minute
}

var _ arpcheck.InterfaceDirectory = (*macDirectory)(nil)

func newMACDirectory(client nodeMetadataClient) *macDirectory {
	return &macDirectory{client: client, now: time.Now, nodes: map[string]nodeMACs{}, byMAC: map[string]macOwner{}, unknown: map[string]time.Time{}}
}

// set records what node published (nothing: zero) at t. A MAC published
// for an interface that is up is never down (VLANs share their parent's
// MAC, bonds their ports').
func (d *macDirectory) set(node string, p publishedMACs, t time.Time) {
	old := d.nodes[node]
	for _, list := range []map[string]string{old.macs, old.down} {
		for _, m := range list {
			if o := d.byMAC[m]; o.node == node {
				delete(d.byMAC, m)
			}
		}
	}
	down := make(map[string]string, len(p.down))
	for ifc, m := range p.down {
		m = strings.ToLower(m)
		down[ifc] = m
		d.byMAC[m] = macOwner{node: node, iface: ifc, down: true}
		delete(d.unknown, m)
	}
	norm := make(map[string]string, len(p.up))
	for ifc, m := range p.up {
		m = strings.ToLower(m)
		norm[ifc] = m
		d.byMAC[m] = macOwner{node: node, iface: ifc}
		delete(d.unknown, m)
	}
	d.nodes[node] = nodeMACs{macs: norm, down: down, read: t}
}

// published decodes a Node's annotations; an absent or malformed one
// gives nothing.
func published(m *metav1.PartialObjectMetadata) publishedMACs {
	decode := func(key string) map[string]string {
		raw, ok := m.Annotations[key]
		if !ok {
			return nil
		}
		macs, err := nodestatus.DecodeMACs(raw)
		if err != nil {
			return nil
		}
		return macs
	}
	return publishedMACs{up: decode(nodestatus.MACsAnnotation), down: decode(nodestatus.DownMACsAnnotation)}
}

// useGet reports whether a miss may be a GET (within the budget) rather than a LIST.
func (d *macDirectory) useGet(now time.Time) bool {
	d.gets = slices.DeleteFunc(d.gets, func(t time.Time) bool { return now.Sub(t) >= time.Minute })
	if len(d.gets) >= macGetBudget {
		return false
	}
	d.gets = append(d.gets, now)
	return true
}

// NodeMACs implements arpcheck.Directory: the MACs node published, sorted
// by interface name. It reads the Node when it has not for macTTL, or with
// fresh when it has not for macReread.
func (d *macDirectory) NodeMACs(ctx context.Context, node string, fresh bool) []net.HardwareAddr {
	if d == nil || node == "" {
		return nil
	}
	d.mu.Lock()
	now := d.now()
	e, ok := d.nodes[node]
	age := now.Sub(e.read)
	stale := d.client != nil && (!ok || age >= macTTL || (fresh && age >= macReread))
	get := stale && d.useGet(now)
	d.mu.Unlock()
	if stale {
		if get {
			d.get(ctx, node)
		} else {
			d.list(ctx)
		}
		d.mu.Lock()
		e = d.nodes[node]
		d.mu.Unlock()
	}
	names := make([]string, 0, len(e.macs))
	for k := range e.macs {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []net.HardwareAddr
	for _, k := range names {
		if hw, err := net.ParseMAC(e.macs[k]); err == nil {
			out = append(out, hw)
		}
	}
	return out
}

// get reads one Node's metadata; a Node that is gone published nothing, an
// error keeps what was read before.
func (d *macDirectory) get(ctx context.Context, node string) {
	m, err := d.client.Get(ctx, node, metav1.GetOptions{})
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case apierrors.IsNotFound(err):
		d.set(node, publishedMACs{}, d.now())
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Cannot read a node's MACs", "peer", node, "err", err)
	default:
		d.set(node, published(m), d.now())
	}
}

// list reads every Node's metadata (in pages), at most once a macListInterval.
func (d *macDirectory) list(ctx context.Context) {
	d.mu.Lock()
	now := d.now()
	if now.Sub(d.lastList) < macListInterval {
		d.mu.Unlock()
		return
	}
	d.lastList = now
	d.mu.Unlock()
	read := map[string]publishedMACs{}
	opts := metav1.ListOptions{Limit: macListPage}
	for {
		l, err := d.client.List(ctx, opts)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot list the nodes' MACs", "err", err)
			return
		}
		for i := range l.Items {
			read[l.Items[i].Name] = published(&l.Items[i])
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for n := range d.nodes {
		if _, ok := read[n]; !ok {
			d.set(n, publishedMACs{}, now)
			delete(d.nodes, n)
		}
	}
	for n, macs := range read {
		d.set(n, macs, now)
	}
	d.listed = now
}

// NodeForMAC implements arpcheck.Directory: the node that published mac,
// and on which interface. Without lookup it answers from what it has read;
// with lookup, a MAC it does not know makes it read every Node (one LIST),
// unless a LIST did not find that MAC within macUnknownTTL.
func (d *macDirectory) NodeForMAC(ctx context.Context, mac net.HardwareAddr, lookup bool) (string, bool) {
	o, ok := d.owner(ctx, mac, lookup)
	return o.node, ok
}

// InterfaceForMAC implements arpcheck.InterfaceDirectory: the node and
// interface that published mac, and whether that interface is down (it
// reads as NodeForMAC does).
func (d *macDirectory) InterfaceForMAC(ctx context.Context, mac net.HardwareAddr, lookup bool) (node, iface string, down, ok bool) {
	o, ok := d.owner(ctx, mac, lookup)
	return o.node, o.iface, o.down, ok
}

func (d *macDirectory) owner(ctx context.Context, mac net.HardwareAddr, lookup bool) (macOwner, bool) {
	if d == nil {
		return macOwner{}, false
	}
	want := strings.ToLower(mac.String())
	d.mu.Lock()
	o, ok := d.byMAC[want]
	miss, seen := d.unknown[want]
	now := d.now()
	d.mu.Unlock()
	if ok || !lookup || d.client == nil || (seen && now.Sub(miss) < macUnknownTTL) {
		return o, ok
	}
	d.list(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if o, ok = d.byMAC[want]; !ok && !d.listed.IsZero() && now.Sub(d.listed) < macListInterval {
		// A LIST of every Node since this lookup began (or within the
		// interval) did not find it: not again for a while.
		for m, t := range d.unknown {
			if now.Sub(t) >= macUnknownTTL {
				delete(d.unknown, m)
			}
		}
		d.unknown[want] = d.listed
	}
	return o, ok
}

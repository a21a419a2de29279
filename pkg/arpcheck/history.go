// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// FlapThreshold is how many changes of the answering MAC an IP may see in
// FlapWindow before it flaps: more than a few an hour means its announcer
// keeps moving (a speaker restarting, memberlist partitions, two
// announcers taking turns), and clients' ARP caches follow each move.
const FlapThreshold = 3

// FlapWindow is the window announcer changes are counted over.
const FlapWindow = time.Hour

// history follows, per probed IP, the MAC that answers, from the probes the
// check sends anyway (no extra probing): a change of that MAC is a failover
// (or a flap), and the probes left unanswered around it measure how long the
// IP was silent. The answering MAC, not MetalLB's ServiceL2Status, is what
// is followed: it is what clients' ARP caches follow, it changes once per
// move (the status and the first reply of the new announcer reach the node
// at different times, so following both would count a move twice), and it
// catches as well a foreign host taking turns with the announcer. Its
// memory is bounded by the IPs probed within FlapWindow. Safe for
// concurrent use.
type history struct {
	mu  sync.Mutex
	ips map[netip.Addr]*ipHistory
}

// ipHistory is what is remembered about one IP.
type ipHistory struct {
	mac, node   string    // the latest single responder and its node
	answered    time.Time // the latest probe it answered
	firstSilent time.Time // the first probe left unanswered since; zero if none
	lastSilent  time.Time // the latest such probe
	changes     []time.Time
	seen        time.Time // the latest probe
}

func newHistory() *history { return &history{ips: map[netip.Addr]*ipHistory{}} }

// observe records the verdict f of a probe of ip at t, and sets on f the
// changes of the answering MAC in the last FlapWindow and, when this probe
// saw the MAC change, the failover. A verdict with several MACs (a
// conflict) says nothing about who answers and leaves the history alone,
// unless it ends a silence with a new MAC among them; a verdict without a
// result leaves it alone too.
func (h *history) observe(ip netip.Addr, t time.Time, f *Finding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.ips[ip]
	if e == nil {
		e = &ipHistory{}
		h.ips[ip] = e
	}
	e.seen = t
	switch {
	case f.Result == ResultNoReply:
		if e.mac != "" {
			if e.firstSilent.IsZero() {
				e.firstSilent = t
			}
			e.lastSilent = t
		}
	case len(f.MACs) > 1 && e.mac != "" && !e.firstSilent.IsZero():
		// Several MACs right after a silence: a new announcer answers while
		// the old one comes back (a speaker restarted as MetalLB moved the
		// IP away from it). The IP did move: to the first new MAC. A
		// conflict without a silence before it (strictARP off, a foreign
		// host) moves nothing, however long it lasts.
		for i, mac := range f.MACs {
			if mac == e.mac {
				continue
			}
			node := ""
			if i < len(f.ResponderNodes) {
				node = f.ResponderNodes[i]
			}
			e.move(f, t, mac, node)
			break
		}
	case len(f.MACs) == 1 && f.Result != ResultUnknown:
		mac := f.MACs[0]
		node := ""
		if len(f.ResponderNodes) == 1 {
			node = f.ResponderNodes[0]
		}
		e.move(f, t, mac, node)
	}
	e.changes = slices.DeleteFunc(e.changes, func(c time.Time) bool { return t.Sub(c) >= FlapWindow })
	f.AnnouncerChanges = len(e.changes)
}

// move records that mac (of node) answered at t, and the failover on f
// when that is a change.
func (e *ipHistory) move(f *Finding, t time.Time, mac, node string) {
	if e.mac != "" && mac != e.mac {
		f.Failover = &Failover{FromMAC: e.mac, ToMAC: mac, FromNode: e.node, ToNode: node,
			UnansweredSeconds: e.unanswered(t).Seconds()}
		e.changes = append(e.changes, t)
	}
	e.mac, e.node, e.answered = mac, node, t
	e.firstSilent, e.lastSilent = time.Time{}, time.Time{}
}

// sweep forgets the IPs not probed for FlapWindow. An IP that leaves the
// targets for a while (its Service's statuses contend while MetalLB moves
// it, the sharding hands it to another node and back) keeps its history.
func (h *history) sweep(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for a, o := range h.ips {
		if t.Sub(o.seen) >= FlapWindow {
			delete(h.ips, a)
		}
	}
}

// unanswered estimates how long the IP was silent before a new answer at
// t: from halfway between the last answer and the first silent probe to
// halfway between the last silent probe and t. Zero when no probe went
// unanswered.
func (e *ipHistory) unanswered(t time.Time) time.Duration {
	if e.firstSilent.IsZero() {
		return 0
	}
	start := e.answered.Add(e.firstSilent.Sub(e.answered) / 2)
	end := e.lastSilent.Add(t.Sub(e.lastSilent) / 2)
	if d := end.Sub(start); d > 0 {
		return d
	}
	return 0
}

// changes returns how many changes of ip's answering MAC are remembered.
func (h *history) changes(ip netip.Addr) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.ips[ip]; e != nil {
		return len(e.changes)
	}
	return 0
}

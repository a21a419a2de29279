// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// probe is one verdict of the history tests: at seconds after the start,
// the MACs that answered (none: no reply; several: a conflict).
type probe struct {
	at   float64
	macs []string
}

func (p probe) finding() Finding {
	f := Finding{IP: "192.0.2.10", MACs: p.macs}
	switch len(p.macs) {
	case 0:
		f.Result = ResultNoReply
	case 1:
		f.Result = ResultAnswered
	default:
		f.Result = ResultConflict
	}
	return f
}

func TestHistoryFailover(t *testing.T) {
	const a, b, c = "52:54:00:00:00:0a", "52:54:00:00:00:0b", "52:54:00:00:00:0c"
	tests := []struct {
		name   string
		probes []probe
		// failovers are the unanswered seconds of each failover seen, in order.
		failovers []float64
		// changes is the last finding's count of changes in the last hour.
		changes int
	}{
		{name: "same announcer", probes: []probe{{0, []string{a}}, {10, []string{a}}, {20, []string{a}}}},
		{name: "silence without a move is no failover", probes: []probe{{0, []string{a}}, {10, nil}, {20, []string{a}}}},
		{name: "seamless move", probes: []probe{{0, []string{a}}, {10, []string{b}}}, failovers: []float64{0}, changes: 1},
		{
			// Silent from halfway between 0 and 10 to halfway between 20 and 30.
			name:      "move after two silent probes",
			probes:    []probe{{0, []string{a}}, {10, nil}, {20, nil}, {30, []string{b}}},
			failovers: []float64{20}, changes: 1,
		},
		{
			name:      "one silent probe",
			probes:    []probe{{0, []string{a}}, {1, nil}, {2, []string{b}}},
			failovers: []float64{1}, changes: 1,
		},
		{
			name:      "a conflict says nothing about who answers",
			probes:    []probe{{0, []string{a}}, {1, []string{a, b}}, {2, []string{a}}, {3, []string{a, b}}},
			failovers: nil,
		},
		{
			// MetalLB moved the IP away from a dead speaker that came back at
			// once: the first probe after the silence hears both.
			name:      "a conflict ending a silence is a move, and the return another",
			probes:    []probe{{0, []string{a}}, {2, nil}, {4, nil}, {6, []string{a, b}}, {8, []string{a}}},
			failovers: []float64{4, 0}, changes: 2, // from 1 to 5
		},
		{
			name:      "a lasting conflict after a silence moves once",
			probes:    []probe{{0, []string{a}}, {2, nil}, {4, []string{a, b}}, {6, []string{a, b}}, {8, []string{a, b}}},
			failovers: []float64{2}, changes: 1, // from 1 to 3
		},
		{
			name:   "silence before the first answer is no failover",
			probes: []probe{{0, nil}, {10, nil}, {20, []string{a}}},
		},
		{
			name: "flapping: four moves in an hour",
			probes: []probe{{0, []string{a}}, {600, []string{b}}, {1200, []string{a}}, {1800, []string{c}},
				{2400, nil}, {2410, []string{a}}},
			failovers: []float64{0, 0, 0, 305}, changes: 4, // from 2100 (halfway 1800–2400) to 2405
		},
		{
			name: "changes older than an hour no longer count",
			probes: []probe{{0, []string{a}}, {60, []string{b}}, {120, []string{a}}, {3659, []string{a}},
				{3661, []string{b}}},
			failovers: []float64{0, 0, 0}, changes: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHistory()
			ip := netip.MustParseAddr("192.0.2.10")
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var got []float64
			var last Finding
			for _, p := range tt.probes {
				f := p.finding()
				h.observe(ip, start.Add(time.Duration(p.at*float64(time.Second))), &f)
				if f.Failover != nil {
					got = append(got, f.Failover.UnansweredSeconds)
				}
				last = f
			}
			if len(got) != len(tt.failovers) {
				t.Fatalf("failovers: got %v, want %v", got, tt.failovers)
			}
			for i := range got {
				if got[i] != tt.failovers[i] {
					t.Errorf("failover %d: got %vs unanswered, want %vs", i, got[i], tt.failovers[i])
				}
			}
			if last.AnnouncerChanges != tt.changes {
				t.Errorf("changes in the last hour: got %d, want %d", last.AnnouncerChanges, tt.changes)
			}
		})
	}
}

func TestHistoryFailoverNamesNodes(t *testing.T) {
	h := newHistory()
	ip := netip.MustParseAddr("192.0.2.10")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := Finding{Result: ResultAnswered, MACs: []string{"52:54:00:00:00:0a"}, ResponderNodes: []string{"node-a"}}
	h.observe(ip, t0, &f)
	f = Finding{Result: ResultWrongResponder, MACs: []string{"52:54:00:00:00:0b"}, ResponderNodes: []string{"node-b"}}
	h.observe(ip, t0.Add(time.Second), &f)
	want := Failover{FromMAC: "52:54:00:00:00:0a", ToMAC: "52:54:00:00:00:0b", FromNode: "node-a", ToNode: "node-b"}
	if f.Failover == nil || *f.Failover != want {
		t.Errorf("failover: got %+v, want %+v", f.Failover, want)
	}
}

func TestHistorySweep(t *testing.T) {
	h := newHistory()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old, recent := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for _, ip := range []netip.Addr{old, recent} {
		f := Finding{Result: ResultAnswered, MACs: []string{"52:54:00:00:00:0a"}}
		h.observe(ip, t0, &f)
	}
	f := Finding{Result: ResultAnswered, MACs: []string{"52:54:00:00:00:0b"}}
	h.observe(recent, t0.Add(30*time.Minute), &f)
	h.sweep(t0.Add(FlapWindow))
	if _, ok := h.ips[old]; ok {
		t.Error("an IP not probed for an hour is still remembered")
	}
	if h.changes(recent) != 1 {
		t.Errorf("the IP probed half an hour ago: got %d changes, want 1", h.changes(recent))
	}
}

// ifaceDir is an InterfaceDirectory over a fixed table.
type ifaceDir struct {
	owners map[string]struct {
		node, iface string
		down        bool
	}
}

func (d ifaceDir) NodeMACs(context.Context, string, bool) []net.HardwareAddr { return nil }

func (d ifaceDir) NodeForMAC(_ context.Context, mac net.HardwareAddr, _ bool) (string, bool) {
	o, ok := d.owners[mac.String()]
	return o.node, ok
}

func (d ifaceDir) InterfaceForMAC(_ context.Context, mac net.HardwareAddr, _ bool) (string, string, bool, bool) {
	o, ok := d.owners[mac.String()]
	return o.node, o.iface, o.down, ok
}

func TestReplyWay(t *testing.T) {
	dir := ifaceDir{owners: map[string]struct {
		node, iface string
		down        bool
	}{
		"52:54:00:00:00:01": {"node-a", "eth0", false},
		"52:54:00:00:00:02": {"node-a", "eth1", false},
		"52:54:00:00:00:03": {"node-a", "eth2", true},
		"52:54:00:00:00:04": {"node-b", "eth0", false},
	}}
	tests := []struct {
		name      string
		target    Target
		result    Result
		mac       string
		want      Result
		wantIface string
	}{
		{"the announced interface", Target{ExpectedNode: "node-a", ExpectedInterfaces: []string{"eth0"}}, ResultAnswered, "52:54:00:00:00:01", ResultAnswered, ""},
		{"another interface of the announcer", Target{ExpectedNode: "node-a", ExpectedInterfaces: []string{"eth0"}}, ResultAnswered, "52:54:00:00:00:02", ResultOtherInterface, "eth1"},
		{"interfaces unknown", Target{ExpectedNode: "node-a"}, ResultAnswered, "52:54:00:00:00:02", ResultAnswered, ""},
		{"a down interface of the announcer", Target{ExpectedNode: "node-a", ExpectedInterfaces: []string{"eth0"}}, ResultWrongResponder, "52:54:00:00:00:03", ResultDownInterface, "eth2"},
		{"a down interface, interfaces unknown", Target{ExpectedNode: "node-a"}, ResultWrongResponder, "52:54:00:00:00:03", ResultDownInterface, "eth2"},
		{"another node stays a wrong responder", Target{ExpectedNode: "node-a", ExpectedInterfaces: []string{"eth0"}}, ResultWrongResponder, "52:54:00:00:00:04", ResultWrongResponder, ""},
		{"an unknown MAC stays a wrong responder", Target{ExpectedNode: "node-a"}, ResultWrongResponder, "52:54:00:00:00:99", ResultWrongResponder, ""},
		{"no announcer", Target{}, ResultAnswered, "52:54:00:00:00:02", ResultAnswered, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Checker{dir: dir}
			mac, err := net.ParseMAC(tt.mac)
			if err != nil {
				t.Fatal(err)
			}
			got, iface := c.replyWay(context.Background(), tt.target, tt.result, mac, true)
			if got != tt.want || iface != tt.wantIface {
				t.Errorf("got %s (%q), want %s (%q)", got, iface, tt.want, tt.wantIface)
			}
		})
	}
	if got, _ := (&Checker{}).replyWay(context.Background(), Target{ExpectedNode: "node-a"}, ResultAnswered, net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}, true); got != ResultAnswered {
		t.Errorf("without an InterfaceDirectory: got %s, want answered", got)
	}
}

func TestReplyWayReasons(t *testing.T) {
	for _, tt := range []struct {
		r      Result
		reason string
		text   string
	}{
		{ResultOtherInterface, ReasonOtherInterface, "reply-from-other-interface"},
		{ResultDownInterface, ReasonDownInterface, "reply-from-down-interface"},
	} {
		if got := reasonFor(tt.r); got != tt.reason {
			t.Errorf("%s: reason %s, want %s", tt.r, got, tt.reason)
		}
		if tt.r.String() != tt.text || !tt.r.Problem() {
			t.Errorf("%d: %q (problem %v), want %q, a problem", int(tt.r), tt.r, tt.r.Problem(), tt.text)
		}
		if severity(tt.r) <= severity(ResultNoReply) || severity(tt.r) >= severity(ResultWrongResponder) {
			t.Errorf("%s: ranks %d, want between no-reply and wrong-responder", tt.r, severity(tt.r))
		}
	}
	f := Finding{IP: "192.0.2.10", Interface: "eth0", Result: ResultOtherInterface, MACs: []string{"52:54:00:00:00:02"},
		ResponderNodes: []string{"node-a"}, ResponderInterface: "eth1", ExpectedInterfaces: []string{"eth0"}, RTTSeconds: 0.001}
	if want := "192.0.2.10 on eth0: reply-from-other-interface by 52:54:00:00:00:02 (node-a) in 1.00ms, the MAC of eth1, not of eth0"; f.String() != want {
		t.Errorf("got %q\nwant %q", f.String(), want)
	}
}

// TestKeepLatestObservesFailoverOnce checks that a verdict carried into a
// run that had no time to probe the IP does not repeat its failover (the
// histogram would count one move twice).
func TestKeepLatestObservesFailoverOnce(t *testing.T) {
	c, err := NewChecker(CheckerOptions{Targets: StaticTargets(), Network: &fakeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	targets := []Target{{IP: netip.MustParseAddr("192.0.2.10")}}
	f := Finding{IP: "192.0.2.10", Result: ResultAnswered, MACs: []string{"52:54:00:00:00:0b"}, AnnouncerChanges: 1,
		Failover: &Failover{FromMAC: "52:54:00:00:00:0a", ToMAC: "52:54:00:00:00:0b", UnansweredSeconds: 3}}
	c.keepLatest(1, targets, []Finding{f}, []bool{true}, []bool{false})
	carried := make([]Finding, 1)
	probed := []bool{false}
	if n, _ := c.keepLatest(2, targets, carried, probed, []bool{true}); n != 1 || !probed[0] {
		t.Fatalf("the verdict was not carried: %d carried", n)
	}
	if carried[0].Failover != nil || carried[0].AnnouncerChanges != 1 {
		t.Errorf("carried verdict: failover %+v, %d changes; want no failover, 1 change", carried[0].Failover, carried[0].AnnouncerChanges)
	}
}

// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"
)

var (
	proberMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	proberIP  = netip.MustParseAddr("10.0.0.1")
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// macsOf renders observations as ip → MAC strings, for diffs.
func macsOf(obs []Observation) map[string][]string {
	out := map[string][]string{}
	for _, o := range obs {
		ms := []string{}
		for _, m := range o.MACs {
			ms = append(ms, m.String())
		}
		out[o.IP.String()] = ms
	}
	return out
}

func newTestProber(t *testing.T, c *fakeConn, window time.Duration, attempts int) *Prober {
	t.Helper()
	p, err := NewProber(c, nil, "test0", proberMAC, proberIP, ProbeOptions{
		Window: window, Attempts: attempts, Limiter: rate.NewLimiter(rate.Inf, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProber(t *testing.T) {
	a := mustMAC(t, "52:54:00:00:00:0a")
	b := mustMAC(t, "52:54:00:00:00:0b")
	tests := []struct {
		name      string
		hosts     []*responder
		probe     []string
		extra     func(t *testing.T, c *fakeConn) // frames injected at the first write
		attempts  int
		want      map[string][]string
		wantReqs  map[string]int
		wantRTTGt map[string]time.Duration
	}{
		{
			name:     "one owner answers",
			hosts:    []*responder{{mac: a, ips: []netip.Addr{ip("10.0.0.9")}, delay: 2 * time.Millisecond}},
			probe:    []string{"10.0.0.9"},
			attempts: 3,
			want:     map[string][]string{"10.0.0.9": {a.String()}},
			wantReqs: map[string]int{"10.0.0.9": 1},
			// The RTT is measured from the request to the first reply.
			wantRTTGt: map[string]time.Duration{"10.0.0.9": 2 * time.Millisecond},
		},
		{
			name:     "silent IP is retried then no-reply",
			probe:    []string{"10.0.0.8"},
			attempts: 3,
			want:     map[string][]string{"10.0.0.8": {}},
			wantReqs: map[string]int{"10.0.0.8": 3},
		},
		{
			name:     "lost first request, answered on retry",
			hosts:    []*responder{{mac: a, ips: []netip.Addr{ip("10.0.0.9")}, skip: 1}},
			probe:    []string{"10.0.0.9"},
			attempts: 3,
			want:     map[string][]string{"10.0.0.9": {a.String()}},
			wantReqs: map[string]int{"10.0.0.9": 2},
		},
		{
			name: "two owners conflict",
			hosts: []*responder{
				{mac: a, ips: []netip.Addr{ip("10.0.0.9")}},
				{mac: b, ips: []netip.Addr{ip("10.0.0.9")}, delay: 5 * time.Millisecond},
			},
			probe:    []string{"10.0.0.9"},
			attempts: 1,
			want:     map[string][]string{"10.0.0.9": {a.String(), b.String()}},
		},
		{
			name:     "duplicate replies from one MAC count once",
			hosts:    []*responder{{mac: a, ips: []netip.Addr{ip("10.0.0.9")}, copies: 4}},
			probe:    []string{"10.0.0.9"},
			attempts: 1,
			want:     map[string][]string{"10.0.0.9": {a.String()}},
		},
		{
			name: "many IPs in flight, duplicate input probed once",
			hosts: []*responder{
				{mac: a, ips: []netip.Addr{ip("10.0.0.9"), ip("10.0.0.10")}},
				{mac: b, ips: []netip.Addr{ip("10.0.0.11")}},
			},
			probe:    []string{"10.0.0.9", "10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.9"},
			attempts: 2,
			want: map[string][]string{
				"10.0.0.9": {a.String()}, "10.0.0.10": {a.String()}, "10.0.0.11": {b.String()}, "10.0.0.12": {},
			},
			wantReqs: map[string]int{"10.0.0.9": 1, "10.0.0.12": 2},
		},
		{
			name:     "garbage, unsolicited and foreign replies are ignored",
			probe:    []string{"10.0.0.9"},
			attempts: 1,
			extra: func(t *testing.T, c *fakeConn) {
				c.deliver(nil)
				c.deliver([]byte{1, 2, 3})
				c.deliver(make([]byte, 60))
				// A reply for an IP we did not probe.
				c.deliver(buildReply(t, a, ip("10.0.0.77"), proberMAC, proberIP))
				// A reply to another host's request for our IP.
				c.deliver(buildReply(t, b, ip("10.0.0.9"), mustMAC(t, "02:00:00:00:00:99"), ip("10.0.0.99")))
				// A reply sent to us but about a different requester address.
				c.deliver(buildReply(t, b, ip("10.0.0.9"), proberMAC, ip("10.0.0.2")))
				// A reply claiming to come from ourselves.
				c.deliver(buildReply(t, proberMAC, ip("10.0.0.9"), proberMAC, proberIP))
			},
			want: map[string][]string{"10.0.0.9": {}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			respond := segment(t, tt.hosts...)
			first := true
			c := newFakeConn(func(c *fakeConn, f []byte) {
				if first && tt.extra != nil {
					first = false
					tt.extra(t, c)
				}
				respond(c, f)
			})
			c.loopback = true // our own requests come back, as on AF_PACKET
			// A window wide enough that a retry due inside it is sent inside it
			// on a loaded machine too: the request counts are exact.
			p := newTestProber(t, c, time.Second, tt.attempts)
			var ips []netip.Addr
			for _, s := range tt.probe {
				ips = append(ips, ip(s))
			}
			obs, err := p.Probe(context.Background(), ips)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, macsOf(obs)); diff != "" {
				t.Errorf("responders (-want +got):\n%s", diff)
			}
			for _, o := range obs {
				if n, ok := tt.wantReqs[o.IP.String()]; ok && o.Requests != n {
					t.Errorf("%s: %d requests, want %d", o.IP, o.Requests, n)
				}
				if min, ok := tt.wantRTTGt[o.IP.String()]; ok && o.RTT < min {
					t.Errorf("%s: RTT %v, want at least %v", o.IP, o.RTT, min)
				}
				if len(o.MACs) == 0 && o.RTT != 0 {
					t.Errorf("%s: RTT %v without a reply", o.IP, o.RTT)
				}
				if len(o.MACs) > 0 && o.RTT <= 0 {
					t.Errorf("%s: answered but RTT %v", o.IP, o.RTT)
				}
			}
		})
	}
}

// TestProberReplyBeforeWriteReturns covers a reply read while WriteTo is
// still returning (on a veth the whole exchange happens inside sendto): it
// must count, with a positive RTT.
func TestProberReplyBeforeWriteReturns(t *testing.T) {
	a := mustMAC(t, "52:54:00:00:00:0a")
	c := newFakeConn(segment(t, &responder{mac: a, ips: []netip.Addr{ip("10.0.0.9")}}))
	c.syncReply = true
	p := newTestProber(t, c, 50*time.Millisecond, 1)
	obs, err := p.Probe(context.Background(), []netip.Addr{ip("10.0.0.9")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"10.0.0.9": {a.String()}}, macsOf(obs)); diff != "" {
		t.Errorf("responders (-want +got):\n%s", diff)
	}
	if obs[0].RTT <= 0 {
		t.Errorf("RTT %v", obs[0].RTT)
	}
}

func TestProberLateReplyNotCounted(t *testing.T) {
	a := mustMAC(t, "52:54:00:00:00:0a")
	c := newFakeConn(segment(t, &responder{mac: a, ips: []netip.Addr{ip("10.0.0.9")}, delay: 300 * time.Millisecond}))
	p := newTestProber(t, c, 100*time.Millisecond, 1)
	obs, err := p.Probe(context.Background(), []netip.Addr{ip("10.0.0.9")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"10.0.0.9": {}}, macsOf(obs)); diff != "" {
		t.Errorf("responders (-want +got):\n%s", diff)
	}
}

func TestProberCancel(t *testing.T) {
	c := newFakeConn(nil)
	p := newTestProber(t, c, 10*time.Second, 3)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := p.Probe(ctx, []netip.Addr{ip("10.0.0.9"), ip("10.0.0.10")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Probe error = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Probe took %v after cancel", d)
	}
}

func TestProberCancelWhileRateLimited(t *testing.T) {
	c := newFakeConn(nil)
	p, err := NewProber(c, nil, "test0", proberMAC, proberIP, ProbeOptions{
		Window: time.Second, Attempts: 1, Limiter: rate.NewLimiter(rate.Every(time.Hour), 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = p.Probe(ctx, []netip.Addr{ip("10.0.0.9"), ip("10.0.0.10")})
	if err == nil {
		t.Fatal("Probe succeeded though the limiter can never admit the second request")
	}
	if got := c.writes(); got != 1 {
		t.Errorf("%d frames written, want 1 (the burst)", got)
	}
}

func TestProberRateLimit(t *testing.T) {
	c := newFakeConn(nil)
	// 20 frames at 100/s with a burst of 1 take at least 190 ms.
	p, err := NewProber(c, nil, "test0", proberMAC, proberIP, ProbeOptions{
		Window: 10 * time.Millisecond, Attempts: 1, Limiter: rate.NewLimiter(100, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ips []netip.Addr
	for i := range 20 {
		ips = append(ips, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}))
	}
	start := time.Now()
	if _, err := p.Probe(context.Background(), ips); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Errorf("20 requests at 100/s went out in %v: the limiter is not applied", d)
	}
}

func TestProberRejects(t *testing.T) {
	c := newFakeConn(nil)
	if _, err := NewProber(nil, nil, "x", proberMAC, proberIP, ProbeOptions{}); err == nil {
		t.Error("nil conn accepted")
	}
	if _, err := NewProber(c, nil, "x", proberMAC[:3], proberIP, ProbeOptions{}); err == nil {
		t.Error("short MAC accepted")
	}
	if _, err := NewProber(c, nil, "x", proberMAC, netip.Addr{}, ProbeOptions{}); err == nil {
		t.Error("invalid source accepted")
	}
	p := newTestProber(t, c, 10*time.Millisecond, 1)
	if _, err := p.Probe(context.Background(), []netip.Addr{netip.MustParseAddr("fd00::1")}); err == nil {
		t.Error("IPv6 target accepted by an IPv4 prober")
	}
	p6, err := NewProber(c, nil, "x", proberMAC, linkLocal(proberMAC), ProbeOptions{Window: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p6.Probe(context.Background(), []netip.Addr{netip.MustParseAddr("10.0.0.1")}); err == nil {
		t.Error("IPv4 target accepted by an IPv6 prober")
	}
	obs, err := p.Probe(context.Background(), nil)
	if err != nil || len(obs) != 0 {
		t.Errorf("empty probe = %v, %v", obs, err)
	}
}

// errConn fails every read with a non-timeout error.
type errConn struct{ *fakeConn }

func (errConn) ReadFrom([]byte) (int, net.Addr, error) { return 0, nil, errors.New("boom") }

func TestProberReadError(t *testing.T) {
	var (
		p   *Prober
		err error
	)
	p, err = NewProber(errConn{newFakeConn(nil)}, nil, "x", proberMAC, proberIP, ProbeOptions{Window: 10 * time.Second, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = p.Probe(context.Background(), []netip.Addr{ip("10.0.0.9")})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("a broken socket gave error %v, want the read error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a broken socket was noticed after %v, not at once", d)
	}
}

// TestProberRetriesInsideWindow: a silent IP gets Attempts requests spaced
// Window/Attempts apart, all inside its window, and the round ends when the
// window closes (TestScheduleRound checks the round's end on a simulated
// clock; here a round never ends before the window).
func TestProberRetriesInsideWindow(t *testing.T) {
	const window, attempts = 600 * time.Millisecond, 3
	var mu sync.Mutex
	var at []time.Time
	c := newFakeConn(func(_ *fakeConn, _ []byte) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
	})
	p := newTestProber(t, c, window, attempts)
	start := time.Now()
	obs, err := p.Probe(context.Background(), []netip.Addr{ip("10.0.0.8")})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if obs[0].Requests != attempts || len(at) != attempts {
		t.Fatalf("%d requests (%d written), want %d", obs[0].Requests, len(at), attempts)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < window/attempts {
			t.Errorf("requests %d and %d are %v apart, want at least %v", i-1, i, gap, window/attempts)
		}
	}
	if last := at[len(at)-1].Sub(at[0]); last >= window {
		t.Errorf("last request %v after the first, outside the %v window", last, window)
	}
	if took < window {
		t.Errorf("round took %v, less than the %v window", took, window)
	}
}

// TestProberReplyToLateRetryAfterWindow: a reply that arrives after the
// IP's window closed does not count, even when it answers a retry.
func TestProberReplyToLateRetryAfterWindow(t *testing.T) {
	a := mustMAC(t, "52:54:00:00:00:0a")
	// The first two requests are lost; the third (sent at 2/3 of the
	// window) is answered half a window later, after the window closed.
	c := newFakeConn(segment(t, &responder{mac: a, ips: []netip.Addr{ip("10.0.0.9")}, skip: 2, delay: 150 * time.Millisecond}))
	p := newTestProber(t, c, 300*time.Millisecond, 3)
	obs, err := p.Probe(context.Background(), []netip.Addr{ip("10.0.0.9")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"10.0.0.9": {}}, macsOf(obs)); diff != "" {
		t.Errorf("responders (-want +got):\n%s", diff)
	}
}

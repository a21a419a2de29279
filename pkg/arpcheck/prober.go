// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"
)

// PacketConn is what the prober needs from a link-layer socket: whole
// Ethernet frames in and out, and read deadlines. *packet.Conn implements
// it; tests use an in-memory fake.
type PacketConn interface {
	// ReadFrom reads one frame.
	ReadFrom(b []byte) (int, net.Addr, error)
	// WriteTo writes one frame to addr.
	WriteTo(b []byte, addr net.Addr) (int, error)
	// SetReadDeadline bounds the current and future ReadFrom calls; a time in
	// the past unblocks a pending read.
	SetReadDeadline(t time.Time) error
}

// stampedReader is implemented by sockets that report when the kernel
// received a frame; the prober then measures RTT up to that instant instead
// of up to when its reader goroutine got to run.
type stampedReader interface {
	ReadFromStamped(b []byte) (int, time.Time, error)
}

// Defaults for ProbeOptions.
const (
	// DefaultWindow is how long replies for an IP are collected.
	DefaultWindow = time.Second
	// DefaultAttempts is how many requests a silent IP gets, one every
	// DefaultWindow/DefaultAttempts (as the kernel retries an unresolved
	// neighbour: mcast_solicit=3 requests, retrans_time 1 s apart).
	DefaultAttempts = 3
	// DefaultRate is the frames per second a node sends at most, sustained.
	DefaultRate = rate.Limit(2000)
	// DefaultBurst is how many frames may go out back to back. With
	// DefaultRate, a node sends at most DefaultBurst + DefaultRate·T frames
	// in any T seconds: 2,512 in any second. A round of 1,000 IPs (300
	// answering) sends 2,400 frames in all, about 1.2 s from first request to
	// last window; the kernel sends 1,000 neighbour requests back to back
	// when traffic to 1,000 new addresses starts, and MetalLB's speaker a
	// gratuitous announcement per IP back to back on every takeover.
	DefaultBurst = 512
)

// readSlice bounds each read, so a reader never sleeps past a stop request
// for long even if a deadline update raced with it.
const readSlice = 200 * time.Millisecond

// ProbeOptions tune a Prober. Zero fields take the defaults.
type ProbeOptions struct {
	// Window is how long replies for an IP are collected, counted from its
	// first request (default 1 s). Retries go out Window/Attempts apart
	// inside it, only while the IP is unanswered; it is never extended.
	Window time.Duration
	// Attempts is how many requests are sent to an IP that does not answer
	// before it is declared no-reply (default 3: one request, two retries).
	Attempts int
	// Limiter paces every frame sent; share one across probers to bound a
	// node's total ARP rate. Default: DefaultRate frames/s, burst DefaultBurst.
	Limiter *rate.Limiter
}

func (o ProbeOptions) withDefaults() ProbeOptions {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Limiter == nil {
		o.Limiter = rate.NewLimiter(DefaultRate, DefaultBurst)
	}
	return o
}

// Observation is what was seen for one probed IP.
type Observation struct {
	// IP is the probed address.
	IP netip.Addr
	// MACs are the distinct hardware addresses that answered within the
	// window, in order of first reply.
	MACs []net.HardwareAddr
	// RTT is the time from the latest request sent before the first reply to
	// that reply: to the kernel's receive timestamp when the socket gives one
	// (so the reader's own wake-up is not counted), else to when it was read.
	// Zero when nothing answered.
	RTT time.Duration
	// Requests is how many requests were sent; zero when the IP was not
	// probed (ProbeUntil's cutoff came first).
	Requests int
}

// Prober sends ARP requests (IPv4) or neighbour solicitations (IPv6) for
// many IPs at once on one socket and collects every reply. One prober
// probes one family: that of its source address. Its fields are set at
// construction and never change; Probe serialises its callers with mu, since
// one socket has one reader.
type Prober struct {
	conn  PacketConn
	dst   net.Addr
	mac   net.HardwareAddr
	src   netip.Addr
	iface string
	opts  ProbeOptions

	mu sync.Mutex
}

// NewProber returns a prober that writes requests to dst (the link-layer
// address Network.Listen returned with conn) from mac/src; src's family
// (IPv4: ARP, IPv6: NDP) is the family of every IP it probes. iface names
// the interface in logs. conn stays owned by the caller.
func NewProber(conn PacketConn, dst net.Addr, iface string, mac net.HardwareAddr, src netip.Addr, opts ProbeOptions) (*Prober, error) {
	if conn == nil {
		return nil, errors.New("creating ARP prober: nil connection")
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("creating ARP prober on %s: %q is not an Ethernet address", iface, mac)
	}
	if !src.Is4() && (!src.Is6() || src.Is4In6()) {
		return nil, fmt.Errorf("creating ARP prober on %s: source %q is not an IP address", iface, src)
	}
	return &Prober{conn: conn, dst: dst, mac: mac, src: src, iface: iface, opts: opts.withDefaults()}, nil
}

// probeState is the per-IP bookkeeping of one Probe call. It is guarded by
// the run's mutex: the sender writes sends, the reader writes replies.
type probeState struct {
	ip      netip.Addr
	sends   []time.Time
	macs    []net.HardwareAddr // distinct, in order of first reply
	arrived []time.Time        // first arrival per entry of macs
	stamped []time.Time        // kernel receive time per entry of macs, zero when unknown
}

// deadline is when the IP's window closes: window after its first request.
// Retries go out inside the window and never extend it.
func (s *probeState) deadline(window time.Duration) time.Time {
	if len(s.sends) == 0 {
		return time.Time{}
	}
	return s.sends[0].Add(window)
}

// Probe sends requests for every IP (duplicates probed once), keeps
// sending to silent ones up to Attempts times within the window, and returns
// one Observation per distinct IP, in input order. Requests to different IPs
// are in flight together; only the rate limiter paces them. Replies for IPs
// not probed, malformed frames and our own requests seen on the socket are
// ignored. It returns early with ctx's error when ctx is done.
func (p *Prober) Probe(ctx context.Context, ips []netip.Addr) ([]Observation, error) {
	return p.ProbeUntil(ctx, ips, time.Time{})
}

// ProbeUntil is Probe, except that no IP gets its first request after
// cutoff (zero: no cutoff): those IPs are not probed in this round and their
// Observation has no Requests. The round then ends at the latest one window
// after cutoff, so a caller with a deadline sets cutoff a window (and some
// margin) before it and gets every verdict it had time for instead of none.
func (p *Prober) ProbeUntil(ctx context.Context, ips []netip.Addr, cutoff time.Time) ([]Observation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("iface", p.iface)

	states := make(map[netip.Addr]*probeState, len(ips))
	order := make([]*probeState, 0, len(ips))
	for _, ip := range ips {
		ip = ip.Unmap()
		if !ip.IsValid() || ip.Is4() != p.src.Is4() {
			return nil, fmt.Errorf("probing %s on %s: a prober sending from %s probes only %s addresses", ip, p.iface, p.src, FamilyOf(p.src))
		}
		if _, ok := states[ip]; ok {
			continue
		}
		st := &probeState{ip: ip}
		states[ip] = st
		order = append(order, st)
	}
	if len(order) == 0 {
		return nil, nil
	}

	var mu sync.Mutex // guards every probeState
	r := &reader{conn: p.conn, mac: p.mac, src: p.src, states: states, mu: &mu, logger: logger, ready: make(chan struct{})}
	// A broken socket ends the round at once instead of after the window.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	readerDone := make(chan error, 1)
	go func() {
		err := r.run()
		if err != nil {
			cancel(err)
		}
		readerDone <- err
	}()
	// Start sending once the reader is about to read: the first reply can
	// come back within microseconds.
	select {
	case <-r.ready:
	case <-ctx.Done():
	}

	sched := newSchedule(order, p.opts.Window, p.opts.Attempts, cutoff)
	sendErr := p.send(ctx, sched, &mu)
	if sendErr == nil {
		// Collect replies until the last window closes. Only this goroutine
		// writes sends, so reading them needs no lock.
		sendErr = sleepUntil(ctx, sched.end(order))
	}
	r.stop()
	if readErr := <-readerDone; readErr != nil {
		return nil, readErr
	}
	if sendErr != nil {
		return nil, sendErr
	}

	mu.Lock()
	defer mu.Unlock()
	out := make([]Observation, 0, len(order))
	for _, st := range order {
		out = append(out, st.observe(p.opts.Window))
	}
	logger.V(4).Info("Probe round done", "protocol", FamilyOf(p.src).Protocol(), "ips", len(out), "requests", r.requests(order))
	return out, nil
}

// observe keeps the replies that arrived within the window and measures the RTT.
func (s *probeState) observe(window time.Duration) Observation {
	o := Observation{IP: s.ip, Requests: len(s.sends), MACs: []net.HardwareAddr{}}
	deadline := s.deadline(window)
	first := -1
	for i, mac := range s.macs {
		if s.arrived[i].After(deadline) {
			continue
		}
		o.MACs = append(o.MACs, mac)
		if first < 0 || s.arrived[i].Before(s.arrived[first]) {
			first = i
		}
	}
	if first < 0 {
		return o
	}
	var sent time.Time
	for _, t := range s.sends {
		if !t.After(s.arrived[first]) {
			sent = t
		}
	}
	if sent.IsZero() {
		return o
	}
	o.RTT = s.arrived[first].Sub(sent)
	// The kernel's receive time (a wall-clock reading) is better when it is
	// consistent with the monotonic one.
	if k := s.stamped[first]; !k.IsZero() {
		if rtt := k.Sub(sent.Round(0)); rtt > 0 && rtt <= o.RTT {
			o.RTT = rtt
		}
	}
	return o
}

// send writes the requests in the order sched gives them, each after a
// token of the rate limiter, until sched has nothing left to send.
func (p *Prober) send(ctx context.Context, sched *schedule, mu *sync.Mutex) error {
	answered := func(st *probeState) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(st.macs) > 0
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("probing on %s: %w", p.iface, err)
		}
		st, wait, done := sched.next(time.Now(), answered)
		if done {
			return nil
		}
		if st == nil {
			if err := sleepUntil(ctx, time.Now().Add(wait)); err != nil {
				return err
			}
			continue
		}
		if err := p.opts.Limiter.Wait(ctx); err != nil {
			return fmt.Errorf("probing on %s: waiting for the rate limiter: %w", p.iface, err)
		}
		if len(st.sends) > 0 && (answered(st) || !st.deadline(p.opts.Window).After(time.Now())) {
			continue // answered, or its window closed, while waiting for the limiter
		}
		if len(st.sends) == 0 && sched.pastCutoff(time.Now()) {
			continue // the cutoff passed while waiting for the limiter: not probed
		}
		frame, err := buildProbe(p.mac, p.src, st.ip)
		if err != nil {
			return err
		}
		// Record the send before writing: on a fast link the reply can be
		// read before WriteTo even returns.
		sent := time.Now()
		mu.Lock()
		st.sends = append(st.sends, sent)
		mu.Unlock()
		if _, err := p.conn.WriteTo(frame, p.dst); err != nil {
			return fmt.Errorf("sending %s request for %s on %s: %w", FamilyOf(st.ip).Protocol(), st.ip, p.iface, err)
		}
		sched.sent(st, sent)
	}
}

// sleepUntil waits until t or until ctx is done.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting for replies: %w", ctx.Err())
	case <-timer.C:
		return nil
	}
}

// reader reads frames until stopped and records the replies that match a
// probed IP. stopMu orders stop against the deadline updates in run, so a
// stop request always interrupts the read in progress.
type reader struct {
	conn   PacketConn
	mac    net.HardwareAddr
	src    netip.Addr
	states map[netip.Addr]*probeState
	mu     *sync.Mutex
	logger klog.Logger
	ready  chan struct{} // closed just before the first read
	once   sync.Once

	stopMu  sync.Mutex
	stopped bool
}

func (r *reader) signalReady() { r.once.Do(func() { close(r.ready) }) }

func (r *reader) stop() {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	r.stopped = true
	_ = r.conn.SetReadDeadline(time.Unix(1, 0))
}

func (r *reader) run() error {
	buf := make([]byte, 1600)
	sr, stamped := r.conn.(stampedReader)
	defer r.signalReady()
	for {
		r.stopMu.Lock()
		if r.stopped {
			r.stopMu.Unlock()
			return nil
		}
		err := r.conn.SetReadDeadline(time.Now().Add(readSlice))
		r.stopMu.Unlock()
		if err != nil {
			return fmt.Errorf("setting read deadline: %w", err)
		}
		r.signalReady()
		var (
			n      int
			kernel time.Time
		)
		if stamped {
			n, kernel, err = sr.ReadFromStamped(buf)
		} else {
			n, _, err = r.conn.ReadFrom(buf)
		}
		now := time.Now()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			r.stopMu.Lock()
			stopped := r.stopped
			r.stopMu.Unlock()
			if stopped {
				return nil
			}
			return fmt.Errorf("reading replies: %w", err)
		}
		r.handle(buf[:n], now, kernel)
	}
}

// handle records one frame if it is a reply to us about a probed IP. now is
// when it was read; kernel, when not zero, when the kernel received it.
func (r *reader) handle(frame []byte, now, kernel time.Time) {
	rep, ok := r.answer(frame)
	if !ok {
		return
	}
	st, ok := r.states[rep.SenderIP]
	if !ok {
		return // not an IP we probe
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(st.sends) == 0 {
		return // arrived before we asked: not an answer to us
	}
	if containsMAC(st.macs, rep.SenderMAC) {
		return
	}
	st.macs = append(st.macs, rep.SenderMAC)
	st.arrived = append(st.arrived, now)
	st.stamped = append(st.stamped, kernel)
}

// answer decodes frame as an answer to one of our requests: an ARP reply or
// a solicited neighbour advertisement addressed to us (an advertisement to
// all nodes when we solicit from ::). Anything else is ignored: requests
// (including our own, looped back), other traffic, garbage, answers to
// someone else's requests, unsolicited announcements.
func (r *reader) answer(frame []byte) (Reply, bool) {
	var rep Reply
	if r.src.Is4() {
		var err error
		if rep, err = ParseReply(frame); err != nil {
			return Reply{}, false
		}
		if rep.TargetIP != r.src || (!bytes.Equal(rep.TargetMAC, r.mac) && !bytes.Equal(rep.TargetMAC, ethernetBroadcast)) {
			return Reply{}, false
		}
	} else {
		adv, err := ParseAdvertisement(frame)
		if err != nil {
			return Reply{}, false
		}
		rep = adv.Reply
		switch {
		case r.src.IsUnspecified():
			if rep.TargetIP != allNodes {
				return Reply{}, false
			}
		case !adv.Solicited || rep.TargetIP != r.src || !bytes.Equal(rep.TargetMAC, r.mac):
			return Reply{}, false
		}
	}
	if bytes.Equal(rep.SenderMAC, r.mac) {
		return Reply{}, false // our own frame
	}
	return rep, true
}

func (r *reader) requests(order []*probeState) int {
	n := 0
	for _, st := range order {
		n += len(st.sends)
	}
	return n
}

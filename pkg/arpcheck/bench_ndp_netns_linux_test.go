// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package arpcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// benchIP6 returns the i-th address of the IPv6 benchmark range fd00:88::/64.
func benchIP6(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfd, 3: 0x88, 14: byte((i + 1) >> 8), 15: byte(i + 1)})
}

// benchTopo6 is benchTopo for IPv6: the responder holds the first
// `answering` IPv6 benchmark addresses.
func benchTopo6(b *testing.B, answering int) (tp *topo, prober string) {
	b.Helper()
	tp = newTopo(b)
	prober = tp.ns("prober")
	resp := tp.ns("resp")
	tp.run("ip", "-n", prober, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", resp)
	lines := []string{"addr add fd00:88::ff00/64 dev eth0", "link set eth0 up"}
	for i := range answering {
		lines = append(lines, fmt.Sprintf("addr add %s/64 dev eth0", benchIP6(i)))
	}
	tp.batch(resp, lines)
	tp.batch(prober, []string{"addr add fd00:88::fe00/64 dev eth0", "link set eth0 up"})
	tp.waitLinkLocal(prober, "eth0")
	return tp, prober
}

// waitLinkLocal waits until iface in ns has its link-local address (the
// kernel adds it shortly after the link's carrier comes up).
func (tp *topo) waitLinkLocal(ns, iface string) {
	tp.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out := tp.run("ip", "-n", ns, "-6", "addr", "show", "dev", iface, "scope", "link")
		if strings.Contains(out, "inet6 fe80:") && !strings.Contains(out, "tentative") {
			return
		}
		if time.Now().After(deadline) {
			tp.t.Fatalf("no link-local address on %s in %s: %s", iface, ns, out)
		}
	}
}

// BenchmarkNetNSNDP1000IPs classifies 1,000 IPv6 IPs, 300 of them answering,
// with a 1 s reply window and the default attempts and rate, and compares the
// wall time with ndisc6 (`-1 -r 1 -w 1000`) run for the IPs one after another
// (extrapolated from a proportional sample of 50 sequential runs).
func BenchmarkNetNSNDP1000IPs(b *testing.B) {
	requireNetNS(b)
	const total, answering, sample = 1000, 300, 50
	_, prober := benchTopo6(b, answering)
	var targets []Target
	for i := range total {
		targets = append(targets, Target{IP: benchIP6(i)})
	}
	c, err := NewChecker(CheckerOptions{
		Targets: StaticTargets(targets...),
		Network: HostNetwork{NetNSPath: netnsPath(prober)},
		Probe:   ProbeOptions{Window: time.Second},
	})
	if err != nil {
		b.Fatal(err)
	}
	var wall time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := c.Run(context.Background())
		wall = time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		counts := map[Result]int{}
		for _, f := range res.Findings {
			counts[f.(Finding).Result]++
		}
		if counts[ResultAnswered] != answering || counts[ResultNoReply] != total-answering || res.Status != check.StatusProblem {
			b.Fatalf("verdicts %v, want %d answered and %d no-reply", counts, answering, total-answering)
		}
	}
	b.ReportMetric(wall.Seconds(), "ipvsguard-wall-s")

	var ndiscWall time.Duration
	answered := 0
	for j := range sample {
		i := j * (total / sample) // every 20th IP, 15 of them below 300
		start := time.Now()
		r := ndisc6(b, prober, "eth0", benchIP6(i).String(), "-1", "-r", "1", "-w", "1000")
		ndiscWall += time.Since(start)
		if len(r.macs) > 0 {
			answered++
		}
	}
	if answered != sample*answering/total {
		b.Fatalf("ndisc6 sample: %d of %d answered, want %d", answered, sample, sample*answering/total)
	}
	extrapolated := ndiscWall.Seconds() * total / sample
	b.ReportMetric(ndiscWall.Seconds(), "ndisc6-sample50-wall-s")
	b.ReportMetric(extrapolated, "ndisc6-1000-wall-s")
	b.ReportMetric(extrapolated/wall.Seconds(), "speedup-x")
}

// sniffer timestamps, in the kernel, every frame leaving or entering an
// interface (ETH_P_ALL sees outgoing frames too), so the round trip of a
// solicitation is measured the same way whichever tool sent it.
type sniffer struct {
	conn *stampedConn
	buf  []byte
}

func newSniffer(b *testing.B, ns, iface string, index int, mac net.HardwareAddr) *sniffer {
	b.Helper()
	pc, err := listenInNetNS(netnsPath(ns), &net.Interface{Index: index, Name: iface, HardwareAddr: mac}, unix.ETH_P_ALL, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pc.Close() })
	rc, err := pc.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) }); err != nil || serr != nil {
		b.Fatalf("SO_TIMESTAMPNS: %v %v", err, serr)
	}
	return &sniffer{conn: &stampedConn{Conn: pc, rc: rc, oob: make([]byte, 128)}, buf: make([]byte, 1600)}
}

// roundTrip reads what the socket queued since the last call and returns
// the time from the first solicitation for target sent from mac to the
// first advertisement for it sent back to mac.
func (s *sniffer) roundTrip(b *testing.B, mac net.HardwareAddr, target netip.Addr) time.Duration {
	b.Helper()
	var sent, answered time.Time
	for {
		_ = s.conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, ts, err := s.conn.ReadFromStamped(s.buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if ts.IsZero() {
			b.Fatal("a frame without a kernel timestamp")
		}
		frame := s.buf[:n]
		if from, _, tgt, err := parseSolicitation(frame); err == nil && tgt == target && from.String() == mac.String() && sent.IsZero() {
			sent = ts
		} else if adv, err := ParseAdvertisement(frame); err == nil && adv.SenderIP == target && adv.TargetMAC.String() == mac.String() && !sent.IsZero() && answered.IsZero() {
			answered = ts
		}
	}
	if sent.IsZero() || answered.IsZero() {
		b.Fatalf("sniffer saw no round trip for %s (sent %v, answered %v)", target, sent, answered)
	}
	return answered.Sub(sent)
}

// BenchmarkNetNSNDPRTT measures the round trip of 100 solicitations of one
// address answered by the responder's kernel over a veth, made by the Prober
// and by ndisc6, and reports the Prober's own RTT against ndisc6's. ndisc6
// prints no RTT, so both tools' round trips are also taken by one sniffer
// socket from the kernel's timestamps of the solicitation leaving and the
// advertisement arriving (wire RTT).
func BenchmarkNetNSNDPRTT(b *testing.B) {
	requireNetNS(b)
	tp, prober := benchTopo6(b, 1)
	ndpRTT(b, tp, prober, benchIP6(0))
}

// BenchmarkNetNSNDPRTTSlowResponder is BenchmarkNetNSNDPRTT where the round
// trip itself dominates, as on a physical LAN, rather than the tools' own
// send and wake-up latencies (microseconds on a veth): the address is held by
// nobody's kernel and answered by a user-space responder after spinning for
// 1 ms.
func BenchmarkNetNSNDPRTTSlowResponder(b *testing.B) {
	requireNetNS(b)
	tp, prober := benchTopo6(b, 0)
	target := netip.MustParseAddr("fd00:88::7:7")
	slowResponder(b, tp, tp.prefix+"resp", target, time.Millisecond)
	ndpRTT(b, tp, prober, target)
}

// ndpRTT probes target 100 times with the Prober and with ndisc6, one after
// the other, and reports the medians and their ratios.
func ndpRTT(b *testing.B, tp *topo, prober string, target netip.Addr) {
	const n = 100
	ctx := context.Background()
	rt, sock, dst := benchSocket(ctx, b, prober, target)
	if !rt.Src.IsLinkLocalUnicast() {
		b.Fatalf("source %s: want the link-local address ndisc6 sends from", rt.Src)
	}
	warm, err := NewProber(sock, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 2 * time.Second, Attempts: 10})
	if err != nil {
		b.Fatal(err)
	}
	if obs, err := warm.Probe(ctx, []netip.Addr{target}); err != nil || len(obs[0].MACs) != 1 {
		b.Fatalf("warm-up probe: %v %v", obs, err)
	}
	p, err := NewProber(sock, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 50 * time.Millisecond, Attempts: 1})
	if err != nil {
		b.Fatal(err)
	}
	sn := newSniffer(b, prober, "eth0", tp.ifindex(prober, "eth0"), rt.MAC)
	var own, ownWire, ndiscWire []time.Duration
	for b.Loop() {
		own, ownWire, ndiscWire = own[:0], ownWire[:0], ndiscWire[:0]
		for range n {
			own = append(own, probeRTT(ctx, b, p, target))
			ownWire = append(ownWire, sn.roundTrip(b, rt.MAC, target))
			if r := ndisc6(b, prober, "eth0", target.String(), "-1", "-r", "1", "-w", "1000"); len(r.macs) != 1 {
				b.Fatalf("ndisc6: %s", r.out)
			}
			ndiscWire = append(ndiscWire, sn.roundTrip(b, rt.MAC, target))
		}
	}
	mo, mw, mn := median(own), median(ownWire), median(ndiscWire)
	b.ReportMetric(float64(mo.Microseconds()), "ipvsguard-median-rtt-us")
	b.ReportMetric(float64(mw.Microseconds()), "ipvsguard-wire-median-rtt-us")
	b.ReportMetric(float64(mn.Microseconds()), "ndisc6-wire-median-rtt-us")
	b.ReportMetric(float64(mo)/float64(mn), "rtt-ratio")
	b.ReportMetric(float64(mw)/float64(mn), "wire-rtt-ratio")
}

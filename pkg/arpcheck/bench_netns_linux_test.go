// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package arpcheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// benchIP returns the i-th address of the benchmark range 10.88.0.0/16.
func benchIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 88, byte(1 + i/250), byte(1 + i%250)})
}

// benchTopo is a prober and one responder namespace joined by a veth pair;
// the responder holds the first `answering` benchmark addresses.
func benchTopo(b *testing.B, answering int) (tp *topo, prober string) {
	b.Helper()
	tp = newTopo(b)
	prober = tp.ns("prober")
	resp := tp.ns("resp")
	tp.run("ip", "-n", prober, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", resp)
	lines := []string{"addr add 10.88.200.2/16 dev eth0", "link set eth0 up"}
	for i := range answering {
		lines = append(lines, fmt.Sprintf("addr add %s/16 dev eth0", benchIP(i)))
	}
	tp.batch(resp, lines)
	tp.batch(prober, []string{"addr add 10.88.200.1/16 dev eth0", "link set eth0 up"})
	return tp, prober
}

// BenchmarkNetNS1000IPs classifies 1,000 IPs, 300 of them answering, with a
// 1 s reply window and the default attempts and rate, and compares the wall
// time with iputils `arping -c1 -w1` run for the IPs one after another
// (extrapolated from a proportional sample of 50 sequential runs).
func BenchmarkNetNS1000IPs(b *testing.B) {
	requireNetNS(b)
	const total, answering, sample = 1000, 300, 50
	_, prober := benchTopo(b, answering)
	var targets []Target
	for i := range total {
		targets = append(targets, Target{IP: benchIP(i)})
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

	// arping one by one: a proportional sample (30% answering).
	var arpingWall time.Duration
	answered := 0
	for j := range sample {
		i := j * (total / sample) // 0, 20, …: every 20th IP, 15 of them below 300
		start := time.Now()
		r := arping(b, prober, "eth0", benchIP(i).String(), "-c", "1", "-w", "1")
		arpingWall += time.Since(start)
		if len(r.macs) > 0 {
			answered++
		}
	}
	if answered != sample*answering/total {
		b.Fatalf("arping sample: %d of %d answered, want %d", answered, sample, sample*answering/total)
	}
	extrapolated := arpingWall.Seconds() * total / sample
	b.ReportMetric(arpingWall.Seconds(), "arping-sample50-wall-s")
	b.ReportMetric(extrapolated, "arping-1000-wall-s")
	b.ReportMetric(extrapolated/wall.Seconds(), "speedup-x")
}

// BenchmarkNetNSRTT measures the RTT of 100 probes of one answering address
// with the Prober and with iputils arping (its printed RTT), and reports the
// ratio of the medians.
func BenchmarkNetNSRTT(b *testing.B) {
	requireNetNS(b)
	const n = 100
	_, prober := benchTopo(b, 1)
	target := benchIP(0)
	ctx := context.Background()
	rt, sock, dst := benchSocket(ctx, b, prober, target)
	p, err := NewProber(sock, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 20 * time.Millisecond, Attempts: 1})
	if err != nil {
		b.Fatal(err)
	}
	// Warm up: the veth pair has just come up.
	warm, err := NewProber(sock, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 2 * time.Second, Attempts: 10})
	if err != nil {
		b.Fatal(err)
	}
	if obs, err := warm.Probe(ctx, []netip.Addr{target}); err != nil || len(obs[0].MACs) != 1 {
		b.Fatalf("warm-up probe: %v %v", obs, err)
	}
	// The same socket read without kernel timestamps, so the RTT is taken
	// in user space on both ends, as arping takes it.
	plain, err := NewProber(plainSocket{sock}, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 20 * time.Millisecond, Attempts: 1})
	if err != nil {
		b.Fatal(err)
	}
	ms, mu, mt := rttMedians(ctx, b, p, plain, prober, target, n)
	b.ReportMetric(float64(mu.Microseconds()), "ipvsguard-median-rtt-us")
	b.ReportMetric(float64(ms.Microseconds()), "ipvsguard-kernel-stamped-median-rtt-us")
	b.ReportMetric(float64(mt.Microseconds()), "arping-median-rtt-us")
	b.ReportMetric(float64((mt + arpingPrintOffset).Microseconds()), "arping-printed-median-rtt-us")
	b.ReportMetric(float64(mu)/float64(mt), "rtt-ratio")
	b.ReportMetric(float64(ms)/float64(mt), "kernel-stamped-rtt-ratio")
}

// plainSocket hides the kernel receive timestamps of a socket.
type plainSocket struct{ Socket }

// benchSocket opens the prober namespace's socket towards target on the
// interface the route names; it is closed when the benchmark ends.
func benchSocket(ctx context.Context, b *testing.B, prober string, target netip.Addr) (Route, Socket, net.Addr) {
	hn := HostNetwork{NetNSPath: netnsPath(prober)}
	rt, err := hn.Route(ctx, target, "")
	if err != nil {
		b.Fatal(err)
	}
	sock, dst, err := hn.Listen(ctx, rt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sock.Close() })
	return rt, sock, dst
}

// rttMedians probes target n times per benchmark iteration with p (kernel
// receive timestamps), plain (user-space timestamps, as arping takes them)
// and arping in the prober namespace, and returns the three median RTTs.
func rttMedians(ctx context.Context, b *testing.B, p, plain *Prober, prober string, target netip.Addr, n int) (stamped, user, arpingRTT time.Duration) {
	probe := func(p *Prober) time.Duration { return probeRTT(ctx, b, p, target) }
	var ss, us, ts []time.Duration
	for b.Loop() {
		ss, us, ts = ss[:0], us[:0], ts[:0]
		for range n {
			ss = append(ss, probe(p))
			us = append(us, probe(plain))
			r := arping(b, prober, "eth0", target.String(), "-c", "1", "-w", "1")
			if len(r.rtts) != 1 {
				b.Fatalf("arping: %s", r.out)
			}
			ts = append(ts, r.rtts[0])
		}
	}
	return median(ss), median(us), median(ts)
}

// probeRTT probes target once and returns the RTT of its single answer. A
// round whose answer missed the short window (the responder or the reader
// not scheduled in time on a loaded machine) is repeated, up to three times:
// such rounds carry no RTT to take a median of.
func probeRTT(ctx context.Context, b *testing.B, p *Prober, target netip.Addr) time.Duration {
	b.Helper()
	var obs []Observation
	var err error
	for range 3 {
		obs, err = p.Probe(ctx, []netip.Addr{target})
		if err == nil && len(obs[0].MACs) == 1 {
			return obs[0].RTT
		}
	}
	b.Fatalf("probe: %v %v", obs, err)
	return 0
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkNetNSRTTSlowResponder compares the two tools' RTT when the round
// trip itself dominates, as on a physical LAN, rather than the tools' own
// wake-up latencies (microseconds on a veth). The kernel has no netem here,
// so the answering address is served by a user-space responder that answers
// each request after spinning for 1 ms; the responder's kernel is told not
// to answer (arp_ignore=8).
func BenchmarkNetNSRTTSlowResponder(b *testing.B) {
	requireNetNS(b)
	const (
		n     = 100
		delay = time.Millisecond
	)
	tp := newTopo(b)
	prober := tp.ns("prober")
	resp := tp.ns("resp")
	tp.run("ip", "-n", prober, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", resp)
	tp.batch(resp, []string{"addr add 10.88.200.2/16 dev eth0", "link set eth0 up"})
	tp.batch(prober, []string{"addr add 10.88.200.1/16 dev eth0", "link set eth0 up"})
	tp.sysctl(resp, "net.ipv4.conf.all.arp_ignore", "8")
	target := netip.MustParseAddr("10.88.7.7")
	slowResponder(b, tp, resp, target, delay)

	ctx := context.Background()
	rt, sock, dst := benchSocket(ctx, b, prober, target)
	warm, _ := NewProber(sock, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 2 * time.Second, Attempts: 10})
	if obs, err := warm.Probe(ctx, []netip.Addr{target}); err != nil || len(obs[0].MACs) != 1 {
		b.Fatalf("warm-up probe: %v %v", obs, err)
	}
	p, _ := NewProber(sock, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 50 * time.Millisecond, Attempts: 1})
	plain, _ := NewProber(plainSocket{sock}, dst, rt.Interface, rt.MAC, rt.Src, ProbeOptions{Window: 50 * time.Millisecond, Attempts: 1})
	ms, mu, mt := rttMedians(ctx, b, p, plain, prober, target, n)
	b.ReportMetric(float64(ms.Microseconds()), "ipvsguard-median-rtt-us")
	b.ReportMetric(float64(mu.Microseconds()), "ipvsguard-userspace-median-rtt-us")
	b.ReportMetric(float64(mt.Microseconds()), "arping-median-rtt-us")
	b.ReportMetric(float64(ms)/float64(mt), "rtt-ratio")
	b.ReportMetric(float64(mu)/float64(mt), "userspace-rtt-ratio")
}

// slowResponder answers requests for target (ARP, or neighbour
// solicitations for an IPv6 target) from user space in namespace resp, each
// after spinning for delay, until the benchmark ends. The namespace's kernel
// must not answer for target itself.
func slowResponder(b *testing.B, tp *topo, resp string, target netip.Addr, delay time.Duration) {
	b.Helper()
	respMAC := mustMAC(b, tp.mac(resp, "eth0"))
	proto := unix.ETH_P_ARP
	if target.Is6() {
		proto = unix.ETH_P_IPV6
	}
	conn, err := listenInNetNS(netnsPath(resp), &net.Interface{Index: tp.ifindex(resp, "eth0"), Name: "eth0", HardwareAddr: respMAC}, proto, nil)
	if err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	b.Cleanup(func() { close(stop); _ = conn.SetReadDeadline(time.Unix(1, 0)); <-done; conn.Close() })
	go func() {
		defer close(done)
		buf := make([]byte, 1600)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			nr, from, err := conn.ReadFrom(buf)
			if err != nil {
				continue
			}
			reqMAC, reqIP, tgt, err := parseRequest(buf[:nr])
			if err != nil || tgt != target {
				continue
			}
			for start := time.Now(); time.Since(start) < delay; {
				// spin: a timer would add the scheduler's granularity
			}
			_, _ = conn.WriteTo(buildReply(b, respMAC, target, reqMAC, reqIP), from)
		}
	}()
}

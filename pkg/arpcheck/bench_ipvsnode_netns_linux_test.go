// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package arpcheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// ipvsNodeTopo is a prober namespace laid out as an IPVS node with n
// LoadBalancer Services: eth0 on the LoadBalancer segment 10.88.0.0/16
// (a veth to a namespace that answers for none of them), and kube-ipvs0
// holding every LoadBalancer IP and a ClusterIP per Service, as kube-proxy
// puts them there. Every LoadBalancer IP is then a local address of the
// prober, so each route lookup falls back to the main table.
func ipvsNodeTopo(tb testing.TB, n int) (prober string, targets []Target) {
	tb.Helper()
	tp := newTopo(tb)
	prober = tp.ns("prober")
	silent := tp.ns("silent")
	tp.run("ip", "-n", prober, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", silent)
	tp.batch(silent, []string{"addr add 10.88.200.2/16 dev eth0", "link set eth0 up"})
	tp.vipDevice(prober, "kube-ipvs0")
	lines := []string{"addr add 10.88.200.1/16 dev eth0", "link set eth0 up"}
	for i := range n {
		lines = append(lines,
			fmt.Sprintf("addr add %s/32 dev kube-ipvs0", benchIP(i)),
			fmt.Sprintf("addr add 10.96.%d.%d/32 dev kube-ipvs0", i/250, i%250+1))
		targets = append(targets, Target{IP: benchIP(i)})
	}
	tp.batch(prober, lines)
	return prober, targets
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNetNSRoutesIPVSNode looks up the routes of the 1,000
// LoadBalancer IPs of an IPVS node (each one local, on kube-ipvs0, next to
// 1,000 ClusterIPs) in one batch, as every ARP check run does first.
func BenchmarkNetNSRoutesIPVSNode(b *testing.B) {
	requireNetNS(b)
	prober, targets := ipvsNodeTopo(b, 1000)
	hn := HostNetwork{NetNSPath: netnsPath(prober)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		routes, errs := hn.Routes(ctx, targets)
		for i, err := range errs {
			if err != nil || routes[i].Interface != "eth0" {
				b.Fatalf("route to %s: %+v %v, want eth0", targets[i].IP, routes[i], err)
			}
		}
	}
}

// BenchmarkNetNSARPCheckIPVSNode runs the whole ARP check over the 1,000
// unanswered LoadBalancer IPs of an IPVS node with the real prober over a
// veth: route lookups, one round of 3,000 requests, 1,000 no-reply
// findings. Besides ns/op (mostly the reply window) it reports the
// process's CPU time per run, which is what a slow (emulated) CPU
// multiplies.
func BenchmarkNetNSARPCheckIPVSNode(b *testing.B) {
	requireNetNS(b)
	prober, targets := ipvsNodeTopo(b, 1000)
	c, err := NewChecker(CheckerOptions{
		Targets: StaticTargets(targets...),
		Network: HostNetwork{NetNSPath: netnsPath(prober)},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var cpu time.Duration
	for b.Loop() {
		before := cpuTime(b)
		res, err := c.Run(context.Background())
		cpu += cpuTime(b) - before
		if err != nil {
			b.Fatal(err)
		}
		if res.Status != check.StatusProblem || res.Reason != ReasonNoReply || len(res.Findings) != len(targets) {
			b.Fatalf("got %s %s with %d findings, want %s %s with %d", res.Status, res.Reason, len(res.Findings), check.StatusProblem, ReasonNoReply, len(targets))
		}
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
}

// SPDX-License-Identifier: Apache-2.0

package ipvscheck_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck/ipvschecktest"
)

// BenchmarkCompare10000 is the user-space part of the agent's resync on a
// node of 10,000 Services × 2 ready endpoints: the ipvs check comparing an
// already-read table and kube-ipvs0 (10,000 addresses) with the Services and
// EndpointSlices from the caches. Only the kernel's dumps are left out; the
// guest benchmark (pkg/ipvs BenchmarkGuestIPVSInspection) runs this same
// comparison under emulation beside the whole resync, which gives the
// emulation factor that turns its kernel part into a native estimate.
func BenchmarkCompare10000(b *testing.B) {
	const n = 10000
	c := ipvschecktest.NewChecker(b, n, ipvschecktest.Static(ipvschecktest.NewTable(n)), ipvschecktest.FixedLink(n))
	b.ReportAllocs()
	start := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := c.Run(context.Background())
		if err != nil || res.Status != check.StatusOK {
			b.Fatalf("ipvs check: %s %s %v", res.Status, res.Message, err)
		}
	}
	b.StopTimer()
	cpu := float64(cpuTime(b)-start) / float64(b.N) / 1e6
	b.ReportMetric(cpu, "cpu-ms/op")
	b.ReportMetric(cpu/60, "millicores@1m")
}

// cpuTime is this process's user + system CPU time so far (every thread:
// the garbage collector's work is part of the cost).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ipvs_test

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// roundTrips is how many netlink round trips BenchmarkNetlinkRoundTrips
// makes per op: one per virtual server of the 10,000-Service node.
const roundTrips = 10000

// netlinkRoundTrips sends n RTM_GETLINK requests for the loopback device
// over one route-netlink socket and reads each answer: the pattern of
// reading real servers (one request and its answer per virtual server), on
// a device every kernel has, so the same code runs on the host and in the
// guest. Their ratio is the emulation factor for the kernel's side of
// reading the IPVS table.
func netlinkRoundTrips(tb testing.TB, n int) {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		tb.Fatal(err)
	}
	req := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.RTM_GETLINK)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[unix.SizeofNlMsghdr+4:], 1) // ifi_index: lo
	buf := make([]byte, 64<<10)
	for i := 1; i <= n; i++ {
		binary.NativeEndian.PutUint32(req[8:], uint32(i))
		if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			tb.Fatal(err)
		}
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			tb.Fatal(err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:m])
		if err != nil || len(msgs) != 1 || msgs[0].Header.Type != unix.RTM_NEWLINK || msgs[0].Header.Seq != uint32(i) {
			tb.Fatalf("round trip %d: %d messages, %v", i, len(msgs), err)
		}
	}
}

// BenchmarkNetlinkRoundTrips: 10,000 route-netlink round trips, CPU per op
// (see netlinkRoundTrips). `make bench-ipvs` runs it on the host and in the
// guest.
func BenchmarkNetlinkRoundTrips(b *testing.B) {
	start := cpuTime(b)
	for i := 0; i < b.N; i++ {
		netlinkRoundTrips(b, roundTrips)
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N)/1e6, "cpu-ms/op")
}

// cpuTime is this process's user + system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	u, k := cpuTimes(tb)
	return u + k
}

// cpuTimes is this process's user and system CPU time so far.
func cpuTimes(tb testing.TB) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

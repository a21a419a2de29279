// SPDX-License-Identifier: Apache-2.0

//go:build guest

package ipvs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck/ipvschecktest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// benchVirtualServers is the table size of BenchmarkGuestIPVSInspection.
const benchVirtualServers = 10000

// timedRun runs a command and returns its wall time and peak RSS (KiB).
//
// The peak is the child's VmHWM, read from /proc every 20 ms while it runs
// (a high-water mark, so the last read is the peak up to its last 20 ms).
// wait4's ru_maxrss cannot serve: Go starts a child with
// clone(CLONE_VM|CLONE_VFORK), so the child's exec inherits the
// high-water mark of this benchmark's own address space (the 10,000-entry
// table it holds), and every command would report this process's size.
func timedRun(b *testing.B, name string, args ...string) (time.Duration, int64, []byte) {
	b.Helper()
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var hwm int64
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v := vmHWM(status); v > hwm {
				hwm = v
			}
			select {
			case <-done:
				peak <- hwm
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	d := time.Since(start)
	close(done)
	hwm := <-peak
	if cmd.ProcessState == nil {
		b.Fatalf("%s: %v", name, err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 && name == "ipvsadm" {
		b.Fatalf("%s %v: exit %d: %s", name, args, code, errb.String())
	}
	return d, hwm, out.Bytes()
}

// vmHWM returns the VmHWM line of a /proc/<pid>/status file in KiB (0 when
// the process is gone or has no address space yet).
func vmHWM(status string) int64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib
		}
	}
	return 0
}

// BenchmarkGuestIPVSInspection: 10,000 virtual servers x 2 real servers (and
// the 10,000 VIPs on kube-ipvs0, as kube-proxy binds them), inspected side
// by side in a rotating order every iteration:
//
//   - diagnose: `ipvs-guard diagnose -o json`, the whole product run (every
//     check; the ipvs check reads the full table, kube-ipvs0 and compares
//     schedulers; arp-sysctls evaluates the 10,000 addresses);
//   - table: this package's Table() in process (the IPVS read alone);
//   - ipvsadm: `ipvsadm -Ln` (the peer: one services dump plus one
//     destinations dump per service, like ours, plus printing).
//
// It reports each one's mean as <name>-ms/op, the ratios to ipvsadm and the
// peak RSS of the diagnose and ipvsadm processes (MiB). ns/op is the whole
// iteration and means nothing alone. `make bench-ipvs` prints them.
func BenchmarkGuestIPVSInspection(b *testing.B) {
	testenv.RequireGuest(b)
	guest.ResetModules(b)
	b.Cleanup(func() {
		guest.Run(b, "ipvsadm", "-C")
		guest.Run(b, "/usr/sbin/ip", "link", "del", "kube-ipvs0")
		guest.ResetModules(b)
	})
	loadModules(b, "ip_vs", "ip_vs_rr", "dummy")
	var rules, addrs strings.Builder
	for i := 0; i < benchVirtualServers; i++ {
		vip, eps := ipvschecktest.VIP(i), ipvschecktest.Endpoints(i)
		fmt.Fprintf(&rules, "-A -t %[1]s:%[4]d -s rr\n-a -t %[1]s:%[4]d -r %[2]s:%[5]d -m -w 1\n-a -t %[1]s:%[4]d -r %[3]s:%[5]d -m -w 1\n",
			vip, eps[0], eps[1], ipvschecktest.Port, ipvschecktest.TargetPort)
		fmt.Fprintf(&addrs, "addr add %s/32 dev kube-ipvs0\n", vip)
	}
	start := time.Now()
	ipvsadmRestore(b, rules.String())
	if r := guest.Run(b, "/usr/sbin/ip", "link", "add", "kube-ipvs0", "type", "dummy"); r.ExitCode != 0 {
		b.Fatalf("%s", r)
	}
	f, err := os.CreateTemp(b.TempDir(), "addrs")
	if err != nil {
		b.Fatal(err)
	}
	f.WriteString(addrs.String())
	f.Close()
	if r := guest.Run(b, "/usr/sbin/ip", "-batch", f.Name()); r.ExitCode != 0 {
		b.Fatalf("%s", r)
	}
	b.Logf("built %d virtual servers x 2 real servers and %d kube-ipvs0 addresses in %s", benchVirtualServers, benchVirtualServers, time.Since(start))

	h := ipvs.New(hostfs.New("/"))
	defer h.Close()
	// Sanity: both tools see the whole table.
	if t, err := h.Table(context.Background()); err != nil || len(t) != benchVirtualServers || t.RealServerCount() != 2*benchVirtualServers {
		b.Fatalf("Table: %d virtual servers, %v", len(t), err)
	}
	_, _, out := timedRun(b, "ipvsadm", "-Ln")
	if n := bytes.Count(out, []byte("\n  -> ")) - 1; n != 2*benchVirtualServers { // minus the title line
		b.Fatalf("ipvsadm -Ln shows %d real servers", n)
	}
	_, _, out = timedRun(b, guest.Bin(), "diagnose", "-o", "json", "--node-name", "bench")
	if !bytes.Contains(out, []byte(fmt.Sprintf(`"virtual_servers": %d,`, benchVirtualServers))) || !bytes.Contains(out, []byte(fmt.Sprintf(`"real_servers": %d,`, 2*benchVirtualServers))) {
		b.Fatalf("diagnose did not inspect the whole table:\n%.2000s", out)
	}

	// The agent's ipvs check as it runs on every resync: the whole table
	// read and compared with 10,000 Services (each with its two ready
	// endpoints) from its caches. Its CPU time per run is the resync cost.
	checker := ipvschecktest.NewChecker(b, benchVirtualServers, h, kubeproxy.ReadLink)
	// The same comparison over the table and kube-ipvs0 as read once: its
	// CPU here against BenchmarkCompare10000's on the host is the
	// emulation factor for user-space work.
	snapshot, err := h.Table(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	link, err := kubeproxy.ReadLink("kube-ipvs0")
	if err != nil {
		b.Fatal(err)
	}
	compare := ipvschecktest.NewChecker(b, benchVirtualServers, ipvschecktest.Static(snapshot),
		func(string) (kubeproxy.Link, error) { return link, nil })
	var resyncUser, resyncSys, compareCPU, tableCPU, rttCPU time.Duration

	var sum = map[string]time.Duration{}
	var rssDiagnose, rssIPVSAdm int64
	runners := []struct {
		name string
		run  func()
	}{
		{"diagnose", func() {
			d, rss, _ := timedRun(b, guest.Bin(), "diagnose", "-o", "json", "--node-name", "bench")
			sum["diagnose"] += d
			rssDiagnose = max(rssDiagnose, rss)
		}},
		{"table", func() {
			s, c := time.Now(), cpuTime(b)
			if _, err := h.Table(context.Background()); err != nil {
				b.Fatal(err)
			}
			sum["table"] += time.Since(s)
			tableCPU += cpuTime(b) - c
		}},
		{"compare", func() {
			s, c := time.Now(), cpuTime(b)
			res, err := compare.Run(context.Background())
			if err != nil || res.Status != check.StatusOK {
				b.Fatalf("ipvs check over the snapshot: %s %s %v", res.Status, res.Message, err)
			}
			sum["compare"] += time.Since(s)
			compareCPU += cpuTime(b) - c
		}},
		{"resync", func() {
			s := time.Now()
			u, k := cpuTimes(b)
			res, err := checker.Run(context.Background())
			if err != nil || res.Status != check.StatusOK {
				b.Fatalf("ipvs check: %s %s %v", res.Status, res.Message, err)
			}
			sum["resync"] += time.Since(s)
			u2, k2 := cpuTimes(b)
			resyncUser, resyncSys = resyncUser+u2-u, resyncSys+k2-k
		}},
		{"rtt", func() {
			c := cpuTime(b)
			netlinkRoundTrips(b, roundTrips)
			rttCPU += cpuTime(b) - c
		}},
		{"ipvsadm", func() {
			d, rss, _ := timedRun(b, "ipvsadm", "-Ln")
			sum["ipvsadm"] += d
			rssIPVSAdm = max(rssIPVSAdm, rss)
		}},
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range runners {
			runners[(i+j)%len(runners)].run()
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	for _, n := range []string{"diagnose", "table", "resync", "ipvsadm"} {
		b.ReportMetric(ms(sum[n]), n+"-ms/op")
	}
	b.ReportMetric(ms(resyncUser+resyncSys), "resync-cpu-ms/op")
	b.ReportMetric(ms(resyncUser), "resync-user-ms/op")
	b.ReportMetric(ms(resyncSys), "resync-sys-ms/op")
	b.ReportMetric(ms(compareCPU), "compare-cpu-ms/op")
	b.ReportMetric(ms(tableCPU), "table-cpu-ms/op")
	b.ReportMetric(ms(rttCPU), "rtt-cpu-ms/op")
	b.ReportMetric(float64(sum["diagnose"])/float64(sum["ipvsadm"]), "ratio-diagnose/ipvsadm")
	b.ReportMetric(float64(sum["table"])/float64(sum["ipvsadm"]), "ratio-table/ipvsadm")
	b.ReportMetric(float64(rssDiagnose)/1024, "diagnose-maxrss-MiB")
	b.ReportMetric(float64(rssIPVSAdm)/1024, "ipvsadm-maxrss-MiB")
}

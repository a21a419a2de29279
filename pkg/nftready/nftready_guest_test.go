// SPDX-License-Identifier: Apache-2.0

//go:build guest && linux

package nftready

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/diagnose"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck/ipvschecktest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

func loadModules(t *testing.T, names ...string) {
	t.Helper()
	l, err := modules.NewNativeLoader(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(context.Background(), names); err != nil {
		t.Fatalf("loading %v: %v", names, err)
	}
	guest.RequireLoaded(t, names...)
}

// TestGuestNFTablesReadiness runs the readiness report and the probe on a
// stock Debian kernel whose nf_tables is modules, with the kernel's modprobe
// helper turned off (a tripwire logs every call):
//
//   - without leave to load modules the probe is held back (no modprobe
//     call) and the module index says every module is shipped;
//   - with every module but nft_numgen loaded, the probe names numgen as
//     the expression the kernel refuses, and only it;
//   - with nft_numgen loaded, every expression is accepted.
func TestGuestNFTablesReadiness(t *testing.T) {
	guest.ResetModules(t)
	t.Cleanup(func() { guest.ResetModules(t) })
	guest.ClearModprobeCalls(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := hostfs.New("/")

	cfg := ReadinessConfig{Host: HostSources(root), Prober: NetNSProber{}}
	res, err := NewReadinessChecker(cfg).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK || !hasFinding(res, KindNFTExpression, SeverityInfo, "") {
		t.Errorf("held-back probe: %s %s\n%v", res.Status, res.Message, res.Findings)
	}
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("the report made the kernel call modprobe: %q", calls)
	}
	t.Logf("held back: %s", res.Message)

	var all []string
	for _, e := range Expressions {
		for _, m := range ExprModules[e] {
			if m != "nft_numgen" && !slices.Contains(all, m) {
				all = append(all, m)
			}
		}
	}
	loadModules(t, all...)
	got, err := NetNSProber{}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		refused := r.Err != nil && !errors.Is(r.Err, errPrereq)
		if refused != (r.Expression == ExprNumgen) {
			t.Errorf("%s: %v", r.Expression, r.Err)
		}
		if r.Err != nil {
			t.Logf("kernel refused %s: %v", r.Expression, r.Err)
		}
	}
	cfg.MayLoadModules = true
	res, err = NewReadinessChecker(cfg).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusProblem || res.Reason != ReasonNotReadyForNftables || !hasFinding(res, KindNFTExpression, SeverityBlocker, ExprNumgen) {
		t.Errorf("without nft_numgen: %s %s\n%v", res.Status, res.Message, res.Findings)
	}

	loadModules(t, "nft_numgen")
	got, err = NetNSProber{}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.Err != nil {
			t.Errorf("%s refused with every module loaded: %v", r.Expression, r.Err)
		}
	}
	res, err = NewReadinessChecker(ReadinessConfig{Host: HostSources(root), Prober: NetNSProber{}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK || hasFinding(res, KindNFTExpression, SeverityBlocker, "") || hasFinding(res, KindNFTExpression, SeverityInfo, "") ||
		!hasFinding(res, KindNFTExpression, SeverityOK, ExprNumgen) {
		t.Errorf("every module loaded: %s %s\n%v", res.Status, res.Message, res.Findings)
	}
	t.Logf("ready: %s %v", res.Message, res.Findings)
}

// hasFinding reports whether res has a finding of kind (and severity and
// object when not empty).
func hasFinding(res check.Result, kind, severity, object string) bool {
	for _, f := range res.Findings {
		rf, ok := f.(Finding)
		if ok && rf.Kind == kind && (severity == "" || rf.Severity == severity) && (object == "" || rf.Object == object) {
			return true
		}
	}
	return false
}

// TestGuestReadiness10000Services is the 10,000-Service node: 10,000
// virtual servers x 2 real servers, their ClusterIPs on kube-ipvs0, one
// foreign virtual server (TCP 10.96.99.99:80) made with ipvsadm, strict ARP
// and kube-proxy's IPVS sysctls set, ipvs-guard's own ipvs.conf. It
// measures `ipvs-guard diagnose --target-mode nftables` (wall time, peak
// RSS from getrusage, as /usr/bin/time -v reports it), then prints the
// readiness report against the 10,000 Services and, as if kube-proxy had
// switched to nftables mode, the ipvs-leftovers report, removing the own
// file as the chart value asks. The reports are the ones
// docs/migrate-to-nftables.md quotes.
func TestGuestReadiness10000Services(t *testing.T) {
	const n = 10000
	guest.ResetModules(t)
	t.Cleanup(func() {
		guest.Run(t, "ipvsadm", "-C")
		guest.Run(t, "/usr/sbin/ip", "link", "del", "kube-ipvs0")
		guest.ResetModules(t)
	})
	var all []string
	for _, e := range Expressions {
		all = append(all, ExprModules[e]...)
	}
	loadModules(t, append([]string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "dummy"}, all...)...)
	var rules, addrs strings.Builder
	for i := 0; i < n; i++ {
		vip, eps := ipvschecktest.VIP(i), ipvschecktest.Endpoints(i)
		fmt.Fprintf(&rules, "-A -t %[1]s:%[4]d -s rr\n-a -t %[1]s:%[4]d -r %[2]s:%[5]d -m -w 1\n-a -t %[1]s:%[4]d -r %[3]s:%[5]d -m -w 1\n",
			vip, eps[0], eps[1], ipvschecktest.Port, ipvschecktest.TargetPort)
		fmt.Fprintf(&addrs, "addr add %s/32 dev kube-ipvs0\n", vip)
	}
	rules.WriteString("-A -t 10.96.99.99:80 -s wrr\n-a -t 10.96.99.99:80 -r 192.168.50.7:80 -m -w 1\n")
	start := time.Now()
	restore := exec.Command("ipvsadm", "-R")
	restore.Stdin = strings.NewReader(rules.String())
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("ipvsadm -R: %v\n%s", err, out)
	}
	if r := guest.Run(t, "/usr/sbin/ip", "link", "add", "kube-ipvs0", "type", "dummy"); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	batch := filepath.Join(t.TempDir(), "addrs")
	if err := os.WriteFile(batch, []byte(addrs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := guest.Run(t, "/usr/sbin/ip", "-batch", batch); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	for p, v := range map[string]string{"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2", "net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1"} {
		if err := os.WriteFile("/proc/sys/"+p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range []string{"net/ipv4/conf/all/arp_ignore", "net/ipv4/conf/all/arp_announce"} {
			_ = os.WriteFile("/proc/sys/"+p, []byte("0"), 0o644)
		}
	})
	own := modules.MergeDeclarations(nil, []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}, nil).Content
	if err := os.MkdirAll("/etc/modules-load.d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(modules.DefaultDeclarationFile, own, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(modules.DefaultDeclarationFile) })
	t.Logf("built %d virtual servers x 2 real servers + 1 foreign, %d kube-ipvs0 addresses in %s", n, n, time.Since(start))

	// The binary, node-local (no kubeconfig), three runs each without and
	// with --target-mode nftables: the report's own cost is the difference.
	base := []string{"diagnose", "-o", "json", "--node-name", "bench", "--kube-proxy-metrics-address", "127.0.0.1:1"}
	for _, extra := range [][]string{nil, {"--target-mode", "nftables"}} {
		for i := range 3 {
			wall, user, sys, hwm, out := measure(t, guest.Bin(), append(slices.Clone(base), extra...)...)
			t.Logf("ipvs-guard %s: wall %s, CPU user %s sys %s, peak RSS (VmHWM) %.1f MiB", strings.Join(append([]string{"diagnose"}, extra...), " "),
				wall.Round(time.Millisecond), user.Round(time.Millisecond), sys.Round(time.Millisecond), float64(hwm)/1024)
			if got := bytes.Contains(out, []byte(`"name": "nftables-readiness"`)); got != (extra != nil) || i > 3 {
				t.Fatalf("readiness report present = %v:\n%.3000s", got, out)
			}
		}
	}

	// In process, against the 10,000 Services: the report an operator
	// with a kubeconfig gets.
	root := hostfs.New("/")
	table := ipvs.New(root)
	defer table.Close()
	readiness := NewReadinessChecker(ReadinessConfig{Host: HostSources(root), Prober: NetNSProber{}, IPVS: table,
		Cluster: ipvschecktest.NewCluster(n), NodeName: "bench"})
	s := time.Now()
	res, err := readiness.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("readiness against %d Services in process: %s", n, time.Since(s).Round(time.Millisecond))
	if !hasFinding(res, KindForeignVirtualServer, SeverityChange, "TCP 10.96.99.99:80") || !hasFinding(res, KindServiceIPNotLocal, SeverityChange, "kube-ipvs0") {
		t.Errorf("readiness: %s\n%v", res.Message, res.Findings)
	}
	if hasFinding(res, KindForeignVirtualServer, SeverityChange, "TCP 10.96.0.1:80") {
		t.Error("a Service's virtual server reported as foreign")
	}
	var text bytes.Buffer
	if err := (diagnose.Report{Node: "bench", Kernel: guestKernel(), Checks: []check.Result{res}}).WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("readiness report:\n%s", text.String())

	// After the switch (kube-proxy reports nftables): the leftovers, then
	// the own file removed as nftablesMigration.removeOwnLeftovers asks.
	nft := func(context.Context) check.IPVSUse { return check.IPVSUse{Mode: "nftables"} }
	for _, removeOwn := range []bool{false, true} {
		lc := NewLeftoversChecker(LeftoversConfig{Root: root, IPVSUse: nft, ReadLink: kubeproxy.ReadLink, IPVS: table, IPSets: HostIPSets, RemoveOwn: removeOwn})
		res, err := lc.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, f := range res.Findings {
			kinds[f.(Leftover).Kind]++
		}
		wantFile := 1
		if removeOwn {
			wantFile = 0
		}
		if res.Reason != ReasonIPVSLeftovers || kinds[LeftoverKubeIPVS0] != 1 || kinds[LeftoverVirtualServer] != maxVirtualServerFindings+1 || kinds[LeftoverSysctl] != 2 || kinds[LeftoverModulesLoadFile] != wantFile {
			t.Errorf("leftovers (removeOwn %v): %v\n%s", removeOwn, kinds, res.Message)
		}
		if removeOwn {
			if _, err := os.Stat(modules.DefaultDeclarationFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("own file not removed: %v", err)
			}
			t.Logf("actions: %q", res.Actions)
			continue
		}
		short := res
		short.Findings = append(short.Findings[:4:4], short.Findings[len(short.Findings)-4:]...)
		short.Remediation = append(short.Remediation[:4:4], short.Remediation[len(short.Remediation)-4:]...)
		text.Reset()
		if err := (diagnose.Report{Node: "bench", Kernel: guestKernel(), Checks: []check.Result{short}}).WriteText(&text); err != nil {
			t.Fatal(err)
		}
		t.Logf("leftovers report (first and last 4 of %d findings):\n%s", len(res.Findings), text.String())
	}
}

func guestKernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// measure runs a command and returns its wall time, CPU times and peak RSS
// in KiB, read from its own VmHWM while it runs (ru_maxrss of a child
// started with CLONE_VM|CLONE_VFORK carries the parent's high-water mark).
func measure(t *testing.T, name string, args ...string) (wall, user, sys time.Duration, hwm int64, out []byte) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var max int64
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile(status); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
						var kb int64
						fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
						if kb > max {
							max = kb
						}
					}
				}
			}
			select {
			case <-done:
				peak <- max
				return
			case <-tick.C:
			}
		}
	}()
	err := cmd.Wait()
	wall = time.Since(start)
	close(done)
	hwm = <-peak
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return wall, time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), hwm, stdout.Bytes()
}

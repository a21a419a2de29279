// SPDX-License-Identifier: Apache-2.0

//go:build guest

package ipvs_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

var schedulers = []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_sh"}

// loadModules loads modules with the project's native loader (the product
// never execs modprobe; neither do its tests).
func loadModules(t testing.TB, names ...string) {
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

func ipvsadm(t testing.TB, args ...string) string {
	t.Helper()
	r := guest.Run(t, "ipvsadm", args...)
	if r.ExitCode != 0 {
		t.Fatalf("ipvsadm failed:\n%s", r)
	}
	return r.Stdout
}

func ipvsadmRestore(t testing.TB, rules string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "rules")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(rules)
	f.Close()
	if r := guest.Run(t, "sh", "-c", "ipvsadm -R < "+f.Name()); r.ExitCode != 0 {
		t.Fatalf("ipvsadm -R failed:\n%s", r)
	}
}

func freshGuest(t *testing.T) {
	t.Helper()
	testenv.RequireGuest(t)
	cleanup := func() {
		guest.Run(t, "ipvsadm", "-C")
		guest.Run(t, "/usr/sbin/ip", "link", "del", "kube-ipvs0")
		guest.ResetModules(t)
	}
	cleanup()
	t.Cleanup(cleanup)
	guest.ClearModprobeCalls(t)
}

// TestGuestTableMatchesIPVSAdm builds a table with the real ipvsadm (every
// scheduler kube-proxy users pick, TCP/UDP/SCTP, IPv4 and IPv6, a virtual
// server without real servers, persistence, one-packet scheduling,
// scheduler flags, a firewall mark, every forwarding method) and requires
// this package's rendering of the table it read to equal `ipvsadm -Ln`.
func TestGuestTableMatchesIPVSAdm(t *testing.T) {
	freshGuest(t)
	loadModules(t, schedulers...)
	ipvsadmRestore(t, `-A -t 10.96.0.1:443 -s rr
-a -t 10.96.0.1:443 -r 10.244.0.1:6443 -m -w 1
-a -t 10.96.0.1:443 -r 10.244.0.2:6443 -m -w 3
-A -u 10.96.0.10:53 -s wrr
-a -u 10.96.0.10:53 -r 10.244.1.2:53 -m -w 2
-a -u 10.96.0.10:53 -r 10.244.1.3:53 -m -w 5
-A -t 10.96.0.10:53 -s wrr
-a -t 10.96.0.10:53 -r 10.244.1.2:53 -m -w 1
-A --sctp-service 10.96.0.20:9000 -s lc
-a --sctp-service 10.96.0.20:9000 -r 10.244.2.2:9000 -m -w 1
-A -t 192.0.2.10:80 -s sh -b sh-port
-a -t 192.0.2.10:80 -r 10.244.3.2:80 -i -w 1
-a -t 192.0.2.10:80 -r 10.244.3.3:80 -g -w 1
-A -t 10.96.0.30:8080 -s rr
-A -t 10.96.0.40:80 -s lc -p 300 -M 255.255.255.0
-a -t 10.96.0.40:80 -r 10.244.4.4:8080 -m -w 0
-A -u 10.96.0.41:5000 -s rr -o
-a -u 10.96.0.41:5000 -r 10.244.4.5:5000 -m -w 1
-A -t [fd00:96::10]:80 -s rr
-a -t [fd00:96::10]:80 -r [fd00:244::20]:8080 -m -w 1
-A -u [fd00:96::a]:53 -s sh
-A -f 7 -s rr
-a -f 7 -r 10.244.5.5:0 -g -w 1
`)
	tbl, err := ipvs.New(hostfs.New("/")).Table(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := ipvsadm(t, "-Ln")
	_, want, _ = strings.Cut(want, "\n") // drop "IP Virtual Server version …"
	var got bytes.Buffer
	if err := tbl.WriteIPVSAdm(&got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got.String()); diff != "" {
		t.Errorf("ipvsadm -Ln vs ours (-ipvsadm +ours)\n%s", diff)
	}
	if len(tbl) != 11 || tbl.RealServerCount() != 12 {
		t.Errorf("read %d virtual servers, %d real servers; want 11, 12", len(tbl), tbl.RealServerCount())
	}
	// The real servers came from one read of the kernel's file (all but the
	// firewall mark's): the same table as one netlink dump per virtual server.
	proc, err := os.ReadFile("/proc/net/ip_vs")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/proc/net/ip_vs:\n%s", proc)
	fromFile, err := ipvs.ParseProcIPVS(proc)
	if err != nil {
		t.Fatalf("parsing /proc/net/ip_vs: %v", err)
	}
	n := 0
	for _, rs := range fromFile {
		n += len(rs)
	}
	if len(fromFile) != 10 || n != 11 {
		t.Errorf("/proc/net/ip_vs: %d virtual servers, %d real servers; want 10, 11 (all but the firewall mark's)", len(fromFile), n)
	}
	// The Handle reads the file itself (through hostfs), not netlink.
	if got := ipvs.New(hostfs.New("/")).RealServersFromProcFS(context.Background()); !cmp.Equal(got, fromFile, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
		t.Errorf("the Handle's read of /proc/net/ip_vs = %v, want %v", got, fromFile)
	}
	netlinkOnly, err := ipvs.New(hostfs.New("/"), ipvs.WithoutProcFS()).Table(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(netlinkOnly, tbl); diff != "" {
		t.Errorf("netlink only vs with /proc/net/ip_vs (-netlink +file):\n%s", diff)
	}
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("modprobe was executed: %q", calls)
	}
	t.Logf("ipvsadm -Ln and ipvs-guard agree on:\n%s", got.String())
}

// TestGuestModuleAbsent: with ip_vs not loaded, Table says so (not an empty
// table), nothing execs modprobe, and ip_vs stays unloaded — in process and
// through the binary.
func TestGuestModuleAbsent(t *testing.T) {
	freshGuest(t)
	guest.RequireNotLoaded(t, "ip_vs")
	_, err := ipvs.New(hostfs.New("/")).Table(context.Background())
	if !errors.Is(err, ipvs.ErrModuleNotLoaded) {
		t.Fatalf("Table err = %v, want ErrModuleNotLoaded", err)
	}
	r := guest.IPVSGuard(t, "diagnose", "-o", "json", "--node-name", "guest")
	if !strings.Contains(r.Stdout, `"reason": "IPVSModuleNotLoaded"`) {
		t.Errorf("diagnose does not report ip_vs as not loaded:\n%s", r)
	}
	guest.RequireNotLoaded(t, "ip_vs")
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("modprobe was executed: %q", calls)
	}
}

// TestGuestReloadUnderRunningProcess unloads and reloads ip_vs under one
// long-lived ipvs checker (this test process, checking in a loop as the
// agent does): it reports the gap, then sees the new table without a
// restart, where a plain moby/ipvs handle fails with ENOENT for good.
func TestGuestReloadUnderRunningProcess(t *testing.T) {
	freshGuest(t)
	loadModules(t, "ip_vs", "ip_vs_rr", "dummy")
	if r := guest.Run(t, "/usr/sbin/ip", "link", "add", "kube-ipvs0", "type", "dummy"); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	if r := guest.Run(t, "/usr/sbin/ip", "addr", "add", "10.96.0.10/32", "dev", "kube-ipvs0"); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	ipvsadm(t, "-A", "-t", "10.96.0.1:443", "-s", "rr")
	ipvsadm(t, "-a", "-t", "10.96.0.1:443", "-r", "10.244.0.1:6443", "-m")

	h := ipvs.New(hostfs.New("/"))
	defer h.Close()
	c, err := ipvscheck.NewChecker(ipvscheck.Config{
		IPVS: h, ReadLink: kubeproxy.ReadLink,
		Scheduler: func(context.Context) (string, string) { return "rr", kubeproxy.FromFlag },
	})
	if err != nil {
		t.Fatal(err)
	}
	// wantMsg is looked for in the message and the findings (the table's
	// size is in the summary finding, not in the message).
	run := func(wantStatus check.Status, wantReason, wantMsg string) {
		t.Helper()
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		text := res.Message
		for _, f := range res.Findings {
			text += "\n" + f.String()
		}
		t.Logf("%s/%s: %s", res.Status, res.Reason, text)
		if res.Status != wantStatus || res.Reason != wantReason || !strings.Contains(text, wantMsg) {
			t.Fatalf("got %s/%s %q, want %s/%s containing %q", res.Status, res.Reason, text, wantStatus, wantReason, wantMsg)
		}
	}
	run(check.StatusSkipped, ipvscheck.ReasonNoKubeconfig, "1 virtual servers, 1 real servers")

	// A plain moby/ipvs handle opened now (family id of this ip_vs instance).
	raw, err := mobyipvs.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.GetServices(); err != nil {
		t.Fatalf("raw handle before reload: %v", err)
	}

	ipvsadm(t, "-C")
	for _, m := range []string{"ip_vs_rr", "ip_vs"} {
		if err := unix.DeleteModule(m, 0); err != nil {
			t.Fatalf("unloading %s: %v", m, err)
		}
	}
	guest.RequireNotLoaded(t, "ip_vs")
	for i := 0; i < 3; i++ { // the loop keeps reporting the gap
		run(check.StatusProblem, ipvscheck.ReasonModuleNotLoaded, "kube-ipvs0 exists")
	}

	loadModules(t, "ip_vs", "ip_vs_rr", "ip_vs_lc")
	ipvsadm(t, "-A", "-t", "10.96.0.1:443", "-s", "rr")
	ipvsadm(t, "-A", "-u", "10.96.0.10:53", "-s", "lc")
	ipvsadm(t, "-a", "-u", "10.96.0.10:53", "-r", "10.244.1.2:53", "-m")

	// The trap: moby/ipvs's process-wide family id is still the old one.
	if _, err := raw.GetServices(); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("raw moby/ipvs handle after reload: err = %v, want ENOENT (the stale family id)", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := c.Run(context.Background())
		if err == nil && res.Reason != ipvscheck.ReasonModuleNotLoaded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not recovered: %+v %v", res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Same checker, same handle, no restart: the new table, scheduler mismatch included.
	run(check.StatusProblem, ipvscheck.ReasonSchedulerMismatch, "2 virtual servers, 1 real servers")
	tbl, err := h.Table(context.Background())
	if err != nil || len(tbl) != 2 {
		t.Fatalf("Table after reload: %d entries, %v", len(tbl), err)
	}
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("modprobe was executed: %q", calls)
	}
}

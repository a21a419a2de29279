// SPDX-License-Identifier: Apache-2.0

//go:build guest

package modules_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// These tests drive the real ipvs-guard binary (the modules check of
// diagnose) in the guest kernel, where nothing but ipvs-guard's own loader can
// load a module (hack/guest/README.md). They follow the CLI contract of
// docs/design.md §8 and nothing else.

const ownedConf = "/etc/modules-load.d/ipvs.conf"

// required is the desired set for the default scheduler (rr) on this Debian
// kernel, which ships nf_conntrack (not nf_conntrack_ipv4).
var required = []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}

// closure is what loading the set must bring in through modules.dep and
// modules.softdep.
var closure = append(slices.Clone(required), "nf_defrag_ipv4", "nf_defrag_ipv6", "libcrc32c")

// modulesLoadDirs are the directories systemd-modules-load reads.
var modulesLoadDirs = []string{"/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d", "/usr/lib/modules-load.d"}

// report is the `-o json` shape of docs/design.md §8.
type report struct {
	Healthy bool          `json:"healthy"`
	Node    string        `json:"node"`
	Kernel  string        `json:"kernel"`
	Checks  []checkResult `json:"checks"`
}

type checkResult struct {
	Name        string            `json:"name"`
	Status      string            `json:"status"`
	Reason      string            `json:"reason"`
	Message     string            `json:"message"`
	Findings    []json.RawMessage `json:"findings"`
	Remediation []string          `json:"remediation"`
	Actions     []string          `json:"actions,omitempty"`
}

type moduleFinding struct {
	Module    string `json:"module"`
	Loaded    bool   `json:"loaded"`
	Builtin   bool   `json:"builtin"`
	Available bool   `json:"available"`
	Declared  bool   `json:"declared"`
	Stale     bool   `json:"stale"`
}

// freshNode brings the guest back to a node with no IPVS module loaded and no
// modules-load.d declaration, and checks after the test that nothing ran the
// `modprobe` tripwire (ipvs-guard never runs modprobe).
func freshNode(t *testing.T) {
	t.Helper()
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	for _, d := range modulesLoadDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Remove("/etc/modules"); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/etc/modules-load.d", 0o755); err != nil {
		t.Fatal(err)
	}
	guest.ClearModprobeCalls(t)
	guest.RequireNotLoaded(t, closure...)
	t.Cleanup(func() {
		if calls := guest.ModprobeCalls(t); len(calls) != 0 {
			t.Errorf("something ran modprobe: %q", calls)
		}
		guest.ResetModules(t)
	})
}

func kernelRelease(t *testing.T) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

// diagnoseJSON runs `diagnose -o json` with args, checks the exit code and
// returns the parsed report and the modules check.
func diagnoseJSON(t *testing.T, wantExit int, args ...string) (report, checkResult) {
	t.Helper()
	r := guest.IPVSGuard(t, append([]string{"diagnose", "-o", "json"}, args...)...)
	if r.ExitCode != wantExit {
		t.Fatalf("exit %d, want %d:\n%s", r.ExitCode, wantExit, r)
	}
	var rep report
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not the report object: %v\n%s", err, r)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON object:\n%s", r)
	}
	if want := kernelRelease(t); rep.Kernel != want {
		t.Errorf("kernel = %q, want %q", rep.Kernel, want)
	}
	if rep.Healthy != (wantExit == 0) {
		t.Errorf("healthy = %v with exit %d", rep.Healthy, wantExit)
	}
	for _, c := range rep.Checks {
		if c.Name == "modules" {
			return rep, c
		}
	}
	t.Fatalf("no modules check in the report:\n%s", r)
	return rep, checkResult{}
}

// moduleFindings decodes the module findings of the modules check by name.
func moduleFindings(t *testing.T, c checkResult) map[string]moduleFinding {
	t.Helper()
	out := map[string]moduleFinding{}
	for _, raw := range c.Findings {
		var f moduleFinding
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("finding %s: %v", raw, err)
		}
		if f.Module == "" {
			continue
		}
		out[f.Module] = f
	}
	return out
}

// activeModules returns the module names a modules-load.d file declares, as
// systemd-modules-load reads it (comments start with # or ;).
func activeModules(data []byte) []string {
	var mods []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		mods = append(mods, l)
	}
	return mods
}

type fileState struct {
	data  []byte
	mtime unix.Timespec
	ctime unix.Timespec
	ino   uint64
}

func statFile(t *testing.T, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fileState{data: data, mtime: st.Mtim, ctime: st.Ctim, ino: st.Ino}
}

func requireDeclares(t *testing.T, path string, mods ...string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	active := activeModules(data)
	for _, m := range mods {
		if !slices.Contains(active, m) {
			t.Errorf("%s does not declare %s:\n%s", path, m, data)
		}
	}
}

// systemdModulesLoad runs the real systemd-modules-load over modules-load.d.
// Its exit code is not trusted (it exits 0 having loaded nothing); callers
// check /proc/modules.
func systemdModulesLoad(t *testing.T) guest.Result {
	t.Helper()
	r := guest.Run(t, guest.SystemdModulesLoad)
	if strings.Contains(r.Stderr, "Failed to find module") {
		t.Errorf("systemd-modules-load could not find a declared module:\n%s", r)
	}
	return r
}

// TestGuestDiagnoseFixLifecycle is the main story: nothing loaded → diagnose
// names each module (exit 1) → --fix loads and declares them → healthy; a
// second --fix touches nothing; the written file alone, fed to the real
// systemd-modules-load after the modules are removed again, loads them all.
func TestGuestDiagnoseFixLifecycle(t *testing.T) {
	freshNode(t)

	step(t, "nothing loaded: diagnose names each module and changes nothing", func(t *testing.T) {
		r := guest.IPVSGuard(t, "diagnose")
		if r.ExitCode != 1 {
			t.Fatalf("exit %d, want 1:\n%s", r.ExitCode, r)
		}
		for _, m := range required {
			if !strings.Contains(r.Stdout, m) {
				t.Errorf("report does not name %s:\n%s", m, r)
			}
		}
		guest.RequireNotLoaded(t, closure...)
		if _, err := os.Stat(ownedConf); !os.IsNotExist(err) {
			t.Errorf("diagnose without --fix touched %s (stat: %v)", ownedConf, err)
		}
	})

	step(t, "json lists each module as not loaded, not declared, available", func(t *testing.T) {
		_, c := diagnoseJSON(t, 1)
		if c.Status != "problem" {
			t.Errorf("modules status = %q, want problem", c.Status)
		}
		got := moduleFindings(t, c)
		for _, m := range required {
			f, ok := got[m]
			if !ok {
				t.Errorf("no finding for %s in %+v", m, got)
				continue
			}
			want := moduleFinding{Module: m, Available: true}
			if f != want {
				t.Errorf("finding %+v, want %+v", f, want)
			}
		}
		guest.RequireNotLoaded(t, closure...)
	})

	step(t, "fix loads every module and declares them for boot", func(t *testing.T) {
		r := guest.IPVSGuard(t, "diagnose", "--fix", "--assume-proxy-mode", "ipvs")
		if r.ExitCode != 0 {
			t.Fatalf("exit %d, want 0 (the state after the fix):\n%s", r.ExitCode, r)
		}
		guest.RequireLoaded(t, closure...)
		requireDeclares(t, ownedConf, required...)
	})

	step(t, "healthy after the fix", func(t *testing.T) {
		r := guest.IPVSGuard(t, "diagnose")
		if r.ExitCode != 0 {
			t.Fatalf("exit %d, want 0:\n%s", r.ExitCode, r)
		}
		_, c := diagnoseJSON(t, 0)
		if c.Status != "ok" {
			t.Errorf("modules status = %q, want ok", c.Status)
		}
		for m, f := range moduleFindings(t, c) {
			if slices.Contains(required, m) && !(f.Loaded && f.Declared && f.Available) {
				t.Errorf("finding %+v after the fix", f)
			}
		}
	})

	step(t, "a second fix changes no byte and no mtime", func(t *testing.T) {
		before := statFile(t, ownedConf)
		r := guest.IPVSGuard(t, "diagnose", "--fix", "--assume-proxy-mode", "ipvs")
		if r.ExitCode != 0 {
			t.Fatalf("exit %d, want 0:\n%s", r.ExitCode, r)
		}
		after := statFile(t, ownedConf)
		if !bytes.Equal(before.data, after.data) {
			t.Errorf("content changed:\n--- before\n%s--- after\n%s", before.data, after.data)
		}
		if before.mtime != after.mtime || before.ctime != after.ctime || before.ino != after.ino {
			t.Errorf("file rewritten: mtime %v→%v ctime %v→%v inode %d→%d", before.mtime, after.mtime, before.ctime, after.ctime, before.ino, after.ino)
		}
	})

	step(t, "systemd-modules-load loads everything from the written file", func(t *testing.T) {
		guest.ResetModules(t)
		guest.RequireNotLoaded(t, closure...)
		systemdModulesLoad(t)
		guest.RequireLoaded(t, closure...)
	})
}

// TestGuestDiagnoseRepairsForeignLines: a pre-existing ipvs.conf with CRLF
// line ends, comments, another module and a stale nf_conntrack_ipv4 is
// repaired without losing a line, and systemd-modules-load then reads it
// without complaint.
func TestGuestDiagnoseRepairsForeignLines(t *testing.T) {
	freshNode(t)
	orig := "# kept: written by the operator\r\n" +
		"; kept: a semicolon comment\r\n" +
		"\r\n" +
		"dummy\r\n" +
		"nf_conntrack_ipv4\r\n" +
		"ip_vs\r\n"
	if err := os.WriteFile(ownedConf, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}

	step(t, "the stale entry is a finding", func(t *testing.T) {
		_, c := diagnoseJSON(t, 1)
		f, ok := moduleFindings(t, c)["nf_conntrack_ipv4"]
		if !ok || !f.Stale || f.Available {
			t.Errorf("nf_conntrack_ipv4 finding = %+v (present %v), want stale and not available", f, ok)
		}
		if got := statFile(t, ownedConf); string(got.data) != orig {
			t.Errorf("diagnose without --fix changed the file:\n%q", got.data)
		}
	})

	step(t, "fix keeps every foreign line and comments out the stale one", func(t *testing.T) {
		r := guest.IPVSGuard(t, "diagnose", "--fix", "--assume-proxy-mode", "ipvs")
		if r.ExitCode != 0 {
			t.Fatalf("exit %d, want 0:\n%s", r.ExitCode, r)
		}
		data, err := os.ReadFile(ownedConf)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(string(data), "\n") {
			got = append(got, strings.TrimRight(l, "\r"))
		}
		// Every line but the stale one survives, in order.
		i := 0
		for _, want := range []string{"# kept: written by the operator", "; kept: a semicolon comment", "", "dummy", "ip_vs"} {
			for i < len(got) && got[i] != want {
				i++
			}
			if i == len(got) {
				t.Errorf("line %q lost or reordered:\n%s", want, data)
				break
			}
			i++
		}
		active := activeModules(data)
		if slices.Contains(active, "nf_conntrack_ipv4") {
			t.Errorf("stale nf_conntrack_ipv4 still declared:\n%s", data)
		}
		if !strings.Contains(string(data), "nf_conntrack_ipv4") {
			t.Errorf("stale nf_conntrack_ipv4 dropped instead of commented out:\n%s", data)
		}
		requireDeclares(t, ownedConf, append([]string{"dummy"}, required...)...)
		guest.RequireLoaded(t, closure...)
	})

	step(t, "healthy, and systemd-modules-load reads the repaired file", func(t *testing.T) {
		if r := guest.IPVSGuard(t, "diagnose"); r.ExitCode != 0 {
			t.Fatalf("exit %d, want 0:\n%s", r.ExitCode, r)
		}
		guest.ResetModules(t)
		systemdModulesLoad(t)
		guest.RequireLoaded(t, append([]string{"dummy"}, closure...)...)
	})
}

// TestGuestDiagnoseStaleInOtherFile: a stale line in a file ipvs-guard does not
// own is a finding naming that file, and --fix leaves the file to its owner.
func TestGuestDiagnoseStaleInOtherFile(t *testing.T) {
	freshNode(t)
	other := "/etc/modules-load.d/legacy.conf"
	content := "# from an old install\nnf_conntrack_ipv4\n"
	if err := os.WriteFile(other, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	r := guest.IPVSGuard(t, "diagnose", "--fix", "--assume-proxy-mode", "ipvs")
	if r.ExitCode != 1 {
		t.Fatalf("exit %d, want 1 (the stale line is left for its owner):\n%s", r.ExitCode, r)
	}
	if !strings.Contains(r.Stdout, other) {
		t.Errorf("report does not name %s:\n%s", other, r)
	}
	if got := statFile(t, other); string(got.data) != content {
		t.Errorf("%s changed:\n%q", other, got.data)
	}
	guest.RequireLoaded(t, closure...)
	requireDeclares(t, ownedConf, required...)
}

// TestGuestDiagnoseScheduler: the configured scheduler's module is part of the
// set; an unknown one is a finding (not in this kernel), exit 1, never declared.
func TestGuestDiagnoseScheduler(t *testing.T) {
	t.Run("lc", func(t *testing.T) {
		freshNode(t)
		r := guest.IPVSGuard(t, "diagnose", "--scheduler", "lc")
		if r.ExitCode != 1 || !strings.Contains(r.Stdout, "ip_vs_lc") {
			t.Fatalf("want exit 1 naming ip_vs_lc:\n%s", r)
		}
		r = guest.IPVSGuard(t, "diagnose", "--scheduler", "lc", "--fix", "--assume-proxy-mode", "ipvs")
		if r.ExitCode != 0 {
			t.Fatalf("exit %d, want 0:\n%s", r.ExitCode, r)
		}
		guest.RequireLoaded(t, append([]string{"ip_vs_lc"}, closure...)...)
		requireDeclares(t, ownedConf, append([]string{"ip_vs_lc"}, required...)...)
	})

	t.Run("nosuch", func(t *testing.T) {
		freshNode(t)
		kernel := kernelRelease(t)
		r := guest.IPVSGuard(t, "diagnose", "--scheduler", "nosuch")
		if r.ExitCode != 1 {
			t.Fatalf("exit %d, want 1:\n%s", r.ExitCode, r)
		}
		if !hasLine(r.Stdout, "ip_vs_nosuch", "not available") {
			t.Errorf("report does not say ip_vs_nosuch is not available for kernel %s:\n%s", kernel, r)
		}
		_, c := diagnoseJSON(t, 1, "--scheduler", "nosuch")
		f, ok := moduleFindings(t, c)["ip_vs_nosuch"]
		if !ok || f.Available || f.Loaded {
			t.Errorf("ip_vs_nosuch finding = %+v (present %v), want not available", f, ok)
		}

		r = guest.IPVSGuard(t, "diagnose", "--scheduler", "nosuch", "--fix", "--assume-proxy-mode", "ipvs")
		if r.ExitCode != 1 {
			t.Fatalf("exit %d with --fix, want 1 (ip_vs_nosuch cannot be fixed):\n%s", r.ExitCode, r)
		}
		guest.RequireLoaded(t, closure...)
		data, err := os.ReadFile(ownedConf)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(activeModules(data), "ip_vs_nosuch") {
			t.Errorf("declared a module the kernel does not have:\n%s", data)
		}
	})
}

// TestGuestDiagnoseReadOnlyEtc: with /etc/modules-load.d read-only, --fix
// fails with a clear error and a non-zero exit; diagnose alone is unaffected.
func TestGuestDiagnoseReadOnlyEtc(t *testing.T) {
	freshNode(t)
	dir := "/etc/modules-load.d"
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remounting %s read-only: %v", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe.conf"), nil, 0o644); err == nil || !os.IsPermission(err) && !isEROFS(err) {
		t.Fatalf("%s is not read-only (write: %v)", dir, err)
	}

	r := guest.IPVSGuard(t, "diagnose")
	if r.ExitCode != 1 {
		t.Fatalf("diagnose on a read-only /etc: exit %d, want 1:\n%s", r.ExitCode, r)
	}
	r = guest.IPVSGuard(t, "diagnose", "--fix", "--assume-proxy-mode", "ipvs")
	if r.ExitCode != 1 && r.ExitCode != 2 {
		t.Fatalf("exit %d, want 1 or 2:\n%s", r.ExitCode, r)
	}
	out := r.Stdout + r.Stderr
	if !strings.Contains(out, "read-only file system") || !strings.Contains(out, dir) {
		t.Errorf("no clear error naming %s as read-only:\n%s", dir, r)
	}
	if _, err := os.Stat(ownedConf); !os.IsNotExist(err) {
		t.Errorf("%s exists on a read-only directory? (stat: %v)", ownedConf, err)
	}
}

// step runs one step of a story as a subtest and stops the story at the first
// failed step: later steps build on the state earlier ones made.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

// hasLine reports whether one line of out contains every word.
func hasLine(out string, words ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			return true
		}
	}
	return false
}

func isEROFS(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno) && errno == syscall.EROFS
}

// TestGuestDiagnoseModuleNotELF: a module file that is not an ELF object
// (once decompressed, where the release ships .ko.xz) makes the kernel
// refuse it; --fix names it, loads the rest and exits non-zero.
func TestGuestDiagnoseModuleNotELF(t *testing.T) {
	freshNode(t)
	ix, err := modules.ReadIndex(hostfs.New("/"), kernelRelease(t))
	if err != nil {
		t.Fatal(err)
	}
	e, err := ix.Entry("ip_vs_sh")
	if err != nil {
		t.Fatal(err)
	}
	ko := fmt.Sprintf("/lib/modules/%s/%s", kernelRelease(t), e.Path)
	orig, err := os.ReadFile(ko)
	if err != nil {
		t.Fatal(err)
	}
	notELF := []byte("this is not an ELF object\n")
	if strings.HasSuffix(ko, ".xz") {
		var b bytes.Buffer
		w, err := xz.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(notELF); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		notELF = b.Bytes()
	} else if !strings.HasSuffix(ko, ".ko") {
		t.Fatalf("ip_vs_sh is %s: neither .ko nor .ko.xz", ko)
	}
	if err := os.WriteFile(ko, notELF, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(ko, orig, 0o644); err != nil {
			t.Errorf("restoring %s: %v", ko, err)
		}
	})
	r := guest.IPVSGuard(t, "diagnose", "--fix", "--assume-proxy-mode", "ipvs")
	if r.ExitCode != 1 && r.ExitCode != 2 {
		t.Fatalf("exit %d, want 1 or 2:\n%s", r.ExitCode, r)
	}
	if out := r.Stdout + r.Stderr; !strings.Contains(out, "ip_vs_sh") {
		t.Errorf("output does not name ip_vs_sh:\n%s", r)
	}
	guest.RequireNotLoaded(t, "ip_vs_sh")
	guest.RequireLoaded(t, "ip_vs", "ip_vs_rr", "ip_vs_wrr", "nf_conntrack")
}

// TestGuestDiagnoseBadKernelFiles: garbage in /proc/modules and a truncated
// modules.dep on the live system give a clear error or finding naming the
// file, exit 1 or 2, never a panic; --fix loads nothing from a broken index.
func TestGuestDiagnoseBadKernelFiles(t *testing.T) {
	t.Run("garbage /proc/modules", func(t *testing.T) {
		freshNode(t)
		garbage := filepath.Join(t.TempDir(), "modules")
		if err := os.WriteFile(garbage, []byte("ip_vs\x00\xff not a modules line\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		bindOver(t, garbage, "/proc/modules")
		for _, args := range [][]string{{"diagnose"}, {"diagnose", "-o", "json"}, {"diagnose", "--fix", "--assume-proxy-mode", "ipvs"}} {
			r := guest.IPVSGuard(t, args...)
			if r.ExitCode != 1 && r.ExitCode != 2 {
				t.Errorf("exit %d, want 1 or 2:\n%s", r.ExitCode, r)
			}
			if !strings.Contains(r.Stdout+r.Stderr, "/proc/modules") {
				t.Errorf("output does not name /proc/modules:\n%s", r)
			}
		}
	})

	t.Run("truncated modules.dep", func(t *testing.T) {
		freshNode(t)
		dep := fmt.Sprintf("/lib/modules/%s/modules.dep", kernelRelease(t))
		data, err := os.ReadFile(dep)
		if err != nil {
			t.Fatal(err)
		}
		// Cut inside the line of ip_vs_sh: the tail of the file is gone.
		i := bytes.Index(data, []byte("kernel/net/netfilter/ipvs/ip_vs_sh.ko"))
		if i < 0 {
			t.Fatalf("ip_vs_sh not in %s", dep)
		}
		cut := filepath.Join(t.TempDir(), "modules.dep")
		if err := os.WriteFile(cut, data[:i+20], 0o644); err != nil {
			t.Fatal(err)
		}
		bindOver(t, cut, dep)
		for _, args := range [][]string{{"diagnose"}, {"diagnose", "--fix", "--assume-proxy-mode", "ipvs"}} {
			r := guest.IPVSGuard(t, args...)
			if r.ExitCode != 1 && r.ExitCode != 2 {
				t.Errorf("exit %d, want 1 or 2:\n%s", r.ExitCode, r)
			}
			if !strings.Contains(r.Stdout+r.Stderr, dep) {
				t.Errorf("output does not name %s:\n%s", dep, r)
			}
		}
		guest.RequireNotLoaded(t, closure...)
	})
}

// bindOver bind-mounts file src over dst until the test ends.
func bindOver(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s over %s: %v", src, dst, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, 0); err != nil {
			t.Errorf("unmounting %s: %v", dst, err)
		}
	})
}

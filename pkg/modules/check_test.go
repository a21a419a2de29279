// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/diagnose"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// copyTree copies testdata/<tree> into a fresh writable directory.
func copyTree(t *testing.T, tree string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", tree))); err != nil {
		t.Fatal(err)
	}
	_ = filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			mode := os.FileMode(0o644)
			if fi.IsDir() {
				mode = 0o755
			}
			_ = os.Chmod(p, mode)
		}
		return nil
	})
	return dst
}

func TestDesiredPerDistro(t *testing.T) {
	tests := []struct {
		tree, rel, scheduler string
		want                 []string
	}{
		{"debian12", debRel, "", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}},
		{"debian12", debRel, "lc", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "ip_vs_lc", "nf_conntrack"}},
		{"debian12", debRel, "sh", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}},
		// 4.18 but RHEL 8 ships no nf_conntrack_ipv4: decided from files, not the version.
		{"rocky8", rockyRel, "", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}},
		{"centos7", centosRel, "", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack_ipv4"}},
		{"ubuntu2404", ubuRel, "Weighted-RR", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "ip_vs_weighted_rr", "nf_conntrack"}},
	}
	for _, tc := range tests {
		t.Run(tc.tree+"/"+tc.scheduler, func(t *testing.T) {
			ix, err := ReadIndex(hostfs.New(filepath.Join("testdata", tc.tree)), tc.rel)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, Desired(tc.scheduler, ix)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func findingOf(t *testing.T, o *Observation, m string) Finding {
	t.Helper()
	for _, f := range o.Findings {
		if f.Module == m {
			return f
		}
	}
	t.Fatalf("no finding for %s in %v", m, o.Findings)
	return Finding{}
}

func TestObserveDetection(t *testing.T) {
	type flags struct{ Loaded, Builtin, Available, Declared, Stale bool }
	tests := []struct {
		name, tree, scheduler, module string
		want                          flags
		wantIn                        []string
	}{
		{"not loaded, on disk", "debian12", "", "ip_vs", flags{Available: true}, nil},
		{"loaded via /proc/modules", "debian12", "", "nf_conntrack", flags{Loaded: true, Available: true}, nil},
		{"xz module loaded and declared", "rocky8", "", "ip_vs_rr", flags{Loaded: true, Available: true, Declared: true}, []string{"/etc/modules-load.d/ipvs.conf"}},
		{"stale in owned file", "rocky8", "", "nf_conntrack_ipv4", flags{Declared: true, Stale: true}, []string{"/etc/modules-load.d/ipvs.conf"}},
		{"old conntrack loaded", "centos7", "", "nf_conntrack_ipv4", flags{Loaded: true, Available: true}, nil},
		{"stale in /etc/modules", "ubuntu2404", "lc", "nf_conntrack_ipv4", flags{Declared: true, Stale: true}, []string{"/etc/modules"}},
		{"unknown scheduler", "debian12", "nosuch", "ip_vs_nosuch", flags{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Observe(hostfs.New(filepath.Join("testdata", tc.tree)), tc.scheduler)
			if err != nil {
				t.Fatal(err)
			}
			f := findingOf(t, o, tc.module)
			got := flags{f.Loaded, f.Builtin, f.Available, f.Declared, f.Stale}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantIn, f.DeclaredIn); diff != "" {
				t.Errorf("declared_in (-want +got):\n%s", diff)
			}
		})
	}
}

func TestObserveBuiltinAndSysModule(t *testing.T) {
	dir := copyTree(t, "debian12")
	rel := filepath.Join(dir, "lib/modules", debRel)
	// ip_vs_sh built in; ip_vs_wrr only visible in /sys/module with its
	// initstate (loaded, not in /proc/modules).
	appendFile(t, filepath.Join(rel, "modules.builtin"), "kernel/net/netfilter/ipvs/ip_vs_sh.ko\n")
	writeIn(t, dir, "sys/module/ip_vs_wrr/initstate", "live\n")
	o, err := Observe(hostfs.New(dir), "")
	if err != nil {
		t.Fatal(err)
	}
	if f := findingOf(t, o, "ip_vs_sh"); !f.Loaded || !f.Builtin || !f.Available {
		t.Errorf("builtin ip_vs_sh = %+v", f)
	}
	if p := o.problems(); contains(p.notPersisted, "ip_vs_sh") || contains(p.notLoaded, "ip_vs_sh") {
		t.Errorf("a built-in module needs neither loading nor declaring: %+v", p)
	}
	if got := findingOf(t, o, "ip_vs_sh").String(); got != "ip_vs_sh: built in" {
		t.Errorf("String() = %q", got)
	}
	// In /sys/module with an initstate, not (yet) in /proc/modules: loaded.
	if f := findingOf(t, o, "ip_vs_wrr"); !f.Loaded || f.Builtin {
		t.Errorf("ip_vs_wrr in /sys/module = %+v", f)
	}
}

// TestBuiltinBySysModule: a module in /sys/module without an initstate
// file and not in /proc/modules is built in (the kernel gives every
// loadable module an initstate), whatever modules.builtin says: never
// reported undeclared, never declared by --fix.
func TestBuiltinBySysModule(t *testing.T) {
	dir := copyTree(t, "debian12")
	// nf_conntrack built in: out of /proc/modules, /sys/module/nf_conntrack
	// holds only its parameters.
	procModules := filepath.Join(dir, "proc/modules")
	b, err := os.ReadFile(procModules)
	must(t, err)
	var kept []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "nf_conntrack ") {
			kept = append(kept, l)
		}
	}
	must(t, os.WriteFile(procModules, []byte(strings.Join(kept, "")), 0o644))
	must(t, os.RemoveAll(filepath.Join(dir, "sys/module/nf_conntrack")))
	writeIn(t, dir, "sys/module/nf_conntrack/parameters/hashsize", "65536\n")
	must(t, os.RemoveAll(filepath.Join(dir, "etc/modules-load.d")))
	must(t, os.Remove(filepath.Join(dir, "etc/modules")))

	o, err := Observe(hostfs.New(dir), "")
	must(t, err)
	f := findingOf(t, o, "nf_conntrack")
	if !f.Builtin || !f.Loaded || !f.Available || f.String() != "nf_conntrack: built in" {
		t.Errorf("nf_conntrack = %+v (%s)", f, f)
	}
	if p := o.problems(); contains(p.notPersisted, "nf_conntrack") {
		t.Errorf("built-in nf_conntrack reported undeclared: %+v", p)
	}
	res, err := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
	must(t, err)
	decl, err := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
	must(t, err)
	if got := activeLines(string(decl)); contains(got, "nf_conntrack") || !contains(got, "ip_vs") {
		t.Errorf("--fix declared %q (actions %q)", got, res.Actions)
	}
}

// TestNoModuleSupport: a kernel without module support (no /proc/modules)
// gets no modprobe or /lib/modules advice: IPVS mode is impossible there
// unless its modules are built in, and --fix loads and declares nothing.
func TestNoModuleSupport(t *testing.T) {
	dir := copyTree(t, "debian12")
	must(t, os.Remove(filepath.Join(dir, "proc/modules")))
	must(t, os.RemoveAll(filepath.Join(dir, "sys/module")))
	must(t, os.RemoveAll(filepath.Join(dir, "lib/modules")))
	must(t, os.RemoveAll(filepath.Join(dir, "etc/modules-load.d")))
	must(t, os.Remove(filepath.Join(dir, "etc/modules")))
	res, err := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
	must(t, err)
	if res.Reason != ReasonModuleNotInKernel || !strings.Contains(res.Message, "has no module support (no /proc/modules)") ||
		!strings.Contains(res.Message, "IPVS mode is impossible on this kernel") || strings.Contains(res.Message, "/lib/modules") {
		t.Errorf("%s: %s", res.Reason, res.Message)
	}
	for _, s := range res.Remediation {
		if strings.Contains(strings.Join(s, " "), "modprobe") {
			t.Errorf("remediation advises modprobe: %q", s)
		}
	}
	if len(res.Actions) > 0 {
		t.Errorf("actions %q", res.Actions)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); err == nil {
		t.Error("--fix declared modules on a kernel without module support")
	}
}

// TestAvailableUnknownInJSON: with no modules.dep and the module not
// loaded, the text says "availability unknown" and JSON says null, never
// false (which means the kernel does not ship it).
func TestAvailableUnknownInJSON(t *testing.T) {
	for _, tc := range []struct {
		f    Finding
		want string
	}{
		{Finding{Module: "ip_vs", wanted: true, unknown: true}, `"available":null`},
		{Finding{Module: "ip_vs", wanted: true, unknown: true, Loaded: true, Available: true}, `"available":true`},
		{Finding{Module: "ip_vs", wanted: true}, `"available":false`},
	} {
		b, err := json.Marshal(tc.f)
		must(t, err)
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %s, want %s", tc.f, b, tc.want)
		}
	}
}

func TestScanDeclarationsPrecedence(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/lib/modules-load.d/ipvs.conf", "ip_vs_lc\n")   // overridden by /etc
	write("etc/modules-load.d/ipvs.conf", "ip_vs\n")          // wins
	write("run/modules-load.d/b.conf", "ip_vs_rr\n")          // only copy
	write("lib/modules-load.d/b.conf", "ip_vs_dh\n")          // overridden by /run
	write("usr/local/lib/modules-load.d/c.txt", "ip_vs_sh\n") // not *.conf
	write("usr/lib/modules-load.d/masked.conf", "ip_vs_wlc\n")
	if err := os.Symlink("/dev/null", filepath.Join(dir, "etc/modules-load.d/masked.conf")); err != nil {
		t.Fatal(err)
	}
	write("etc/modules", "# comment\nip_vs_wrr\n")
	got, err := ScanDeclarations(hostfs.New(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Declaration{
		{Module: "ip_vs_rr", File: "/run/modules-load.d/b.conf", Line: 1},
		{Module: "ip_vs", File: "/etc/modules-load.d/ipvs.conf", Line: 1},
		{Module: "ip_vs_wrr", File: "/etc/modules", Line: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestMergeDeclarations(t *testing.T) {
	want := []string{"ip_vs", "ip_vs_rr", "nf_conntrack"}
	stale := map[string]string{"nf_conntrack_ipv4": "not in kernel 6.1.0-56-amd64"}
	tests := []struct {
		name, in, out    string
		added, commented []string
		changed          bool
	}{
		{name: "new file", in: "",
			out:   newFileHeader + "ip_vs\nip_vs_rr\nnf_conntrack\n",
			added: []string{"ip_vs", "ip_vs_rr", "nf_conntrack"}, changed: true},
		{name: "complete file unchanged", in: "ip_vs\nip_vs_rr\nnf_conntrack\n", out: "ip_vs\nip_vs_rr\nnf_conntrack\n"},
		{name: "crlf comments foreign and stale",
			in:    "# mine\r\n; semicolon\r\n\r\nbr_netfilter\r\n  ip-vs  \r\nnf_conntrack_ipv4\r\n",
			out:   "# mine\r\n; semicolon\r\n\r\nbr_netfilter\r\n  ip-vs  \r\n# nf_conntrack_ipv4  # ipvs-guard: not in kernel 6.1.0-56-amd64\r\nip_vs_rr\r\nnf_conntrack\r\n",
			added: []string{"ip_vs_rr", "nf_conntrack"}, commented: []string{"nf_conntrack_ipv4"}, changed: true},
		{name: "no final newline", in: "overlay", out: "overlay\nip_vs\nip_vs_rr\nnf_conntrack\n",
			added: []string{"ip_vs", "ip_vs_rr", "nf_conntrack"}, changed: true},
		{name: "already commented stale kept", in: "# nf_conntrack_ipv4  # ipvs-guard: not in kernel 6.1.0-56-amd64\nip_vs\nip_vs_rr\nnf_conntrack\n",
			out: "# nf_conntrack_ipv4  # ipvs-guard: not in kernel 6.1.0-56-amd64\nip_vs\nip_vs_rr\nnf_conntrack\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := MergeDeclarations([]byte(tc.in), want, stale)
			if diff := cmp.Diff(tc.out, string(got.Content)); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.added, got.Added); diff != "" {
				t.Errorf("added (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.commented, got.CommentedOut); diff != "" {
				t.Errorf("commented out (-want +got):\n%s", diff)
			}
			if got.Changed != tc.changed {
				t.Errorf("changed = %v, want %v", got.Changed, tc.changed)
			}
			if again := MergeDeclarations(got.Content, want, stale); again.Changed {
				t.Errorf("second merge changed the content again:\n%q", again.Content)
			}
		})
	}
}

// procLoader is a fake Loader that "loads" modules by appending them to the
// tree's /proc/modules, so the re-observation sees them.
type procLoader struct {
	root  string
	calls [][]string
	fail  map[string]error
}

func (p *procLoader) Load(_ context.Context, names []string) ([]string, error) {
	p.calls = append(p.calls, names)
	var done []string
	var errs []error
	for _, n := range names {
		if err := p.fail[n]; err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, n)
	}
	f, err := os.OpenFile(filepath.Join(p.root, "proc/modules"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, n := range done {
		if _, err := f.WriteString(n + " 16384 0 - Live 0x0000000000000000\n"); err != nil {
			return nil, err
		}
	}
	return done, errors.Join(errs...)
}

func TestRemediateAndIdempotence(t *testing.T) {
	dir := copyTree(t, "debian12")
	owned := filepath.Join(dir, "etc/modules-load.d/ipvs.conf")
	orig := "# ours\r\nbr_netfilter\r\nnf_conntrack_ipv4\r\nip_vs\r\n"
	if err := os.WriteFile(owned, []byte(orig), 0o640); err != nil {
		t.Fatal(err)
	}
	loader := &procLoader{root: dir}
	c := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: loader})
	res, err := c.Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK {
		t.Fatalf("after fix: %s %s: %s", res.Status, res.Reason, res.Message)
	}
	wantFile := "# ours\r\nbr_netfilter\r\n# nf_conntrack_ipv4  # ipvs-guard: not in kernel 6.1.0-56-amd64\r\nip_vs\r\nip_vs_rr\r\nip_vs_wrr\r\nip_vs_sh\r\nnf_conntrack\r\n"
	b, _ := os.ReadFile(owned)
	if diff := cmp.Diff(wantFile, string(b)); diff != "" {
		t.Errorf("written file (-want +got):\n%s", diff)
	}
	fi, _ := os.Stat(owned)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640 kept", fi.Mode().Perm())
	}
	wantActions := []string{
		"wrote /etc/modules-load.d/ipvs.conf: declared ip_vs_rr, ip_vs_wrr, ip_vs_sh, nf_conntrack; commented out nf_conntrack_ipv4 (not in kernel 6.1.0-56-amd64)",
		"loaded ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh",
	}
	if diff := cmp.Diff(wantActions, res.Actions); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"}}, loader.calls); diff != "" {
		t.Errorf("load calls (-want +got):\n%s", diff)
	}

	// A second run changes nothing: no load, no write (same inode, same mtime).
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(owned, past, past); err != nil {
		t.Fatal(err)
	}
	before := statOf(t, owned)
	res, err = c.Run(testCtx(t))
	if err != nil || res.Status != check.StatusOK || len(res.Actions) != 0 {
		t.Fatalf("second run: %v %+v", err, res)
	}
	after := statOf(t, owned)
	if before != after {
		t.Errorf("second run touched the file: before %+v after %+v", before, after)
	}
	if len(loader.calls) != 1 {
		t.Errorf("second run loaded again: %v", loader.calls)
	}
}

type fileID struct {
	ino   uint64
	mtime int64
}

func statOf(t *testing.T, p string) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return fileID{ino: st.Ino, mtime: st.Mtim.Nano()}
}

func TestObserveOnlyChangesNothing(t *testing.T) {
	dir := copyTree(t, "debian12")
	loader := &procLoader{root: dir}
	c := NewChecker(Config{Root: hostfs.New(dir), Loader: loader})
	res, err := c.Run(testCtx(t))
	if err != nil || res.Status != check.StatusProblem || res.Reason != ReasonModulesNotLoaded {
		t.Fatalf("got %v %+v", err, res)
	}
	if len(loader.calls) != 0 || len(res.Actions) != 0 {
		t.Errorf("observe-only run acted: calls %v actions %v", loader.calls, res.Actions)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("observe-only run wrote the declaration file: %v", err)
	}
}

func TestStaleInForeignFileIsNotEdited(t *testing.T) {
	dir := copyTree(t, "ubuntu2404")
	before, _ := os.ReadFile(filepath.Join(dir, "etc/modules"))
	c := NewChecker(Config{Root: hostfs.New(dir), Scheduler: "lc", Remediate: true, Loader: &procLoader{root: dir}})
	res, err := c.Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusProblem || res.Reason != ReasonStaleModuleDeclaration || !strings.Contains(res.Message, "/etc/modules") {
		t.Errorf("got %s %s: %s", res.Status, res.Reason, res.Message)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "etc/modules"))
	if string(before) != string(after) {
		t.Errorf("/etc/modules was edited")
	}
	if len(res.Actions) != 0 {
		t.Errorf("actions = %v, want none", res.Actions)
	}
}

// TestReadOnlyEtc: the declaration file cannot be written; the check says
// so clearly, still loads the modules, and never panics.
func TestReadOnlyEtc(t *testing.T) {
	dir := copyTree(t, "debian12")
	mld := filepath.Join(dir, "etc/modules-load.d")
	makeReadOnly(t, mld)
	loader := &procLoader{root: dir}
	c := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: loader})
	res, err := c.Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusProblem || res.Reason != ReasonModulesNotPersisted {
		t.Errorf("status %s reason %s, want problem ModulesNotPersisted", res.Status, res.Reason)
	}
	if !strings.Contains(res.Message, "could not write /etc/modules-load.d/ipvs.conf:") {
		t.Errorf("message does not explain the write failure: %s", res.Message)
	}
	if diff := cmp.Diff([]string{"loaded ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh"}, res.Actions); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	ents, _ := os.ReadDir(mld)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".ipvs.conf.tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

// makeReadOnly makes dir unwritable: a read-only bind mount as root (where
// permission bits do not stop writes), chmod 0555 otherwise.
func makeReadOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		return
	}
	err := unix.Mount(dir, dir, "", unix.MS_BIND, "")
	if err == nil {
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		err = unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
	}
	testenv.Require(t, err == nil, "a read-only bind mount (as root): "+errString(err))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestBadInputIsAnErrorNotAPanic(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(t *testing.T, dir string)
		wantErr string
	}{
		{name: "proc modules is a directory", mutate: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "proc/modules")
			must(t, os.Remove(p))
			must(t, os.Mkdir(p, 0o755))
		}, wantErr: "is a directory"},
		{name: "truncated modules.dep", mutate: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "lib/modules", debRel, "modules.dep")
			b, err := os.ReadFile(p)
			must(t, err)
			must(t, os.WriteFile(p, b[:len(b)-len(b)/3-7], 0o644))
		}, wantErr: "modules.dep: line"},
		{name: "no kernel release", mutate: func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "proc/sys/kernel/osrelease")))
		}, wantErr: "reading kernel release"},
	}
	if os.Geteuid() != 0 {
		tests = append(tests, struct {
			name    string
			mutate  func(t *testing.T, dir string)
			wantErr string
		}{name: "proc modules mode 000", mutate: func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, "proc/modules"), 0))
		}, wantErr: "permission denied"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyTree(t, "debian12")
			tc.mutate(t, dir)
			c := NewChecker(Config{Root: hostfs.New(dir)})
			rep := diagnose.Run(testCtx(t), "n", "", []check.Checker{c})
			if rep.ExitCode() != diagnose.ExitError {
				t.Fatalf("exit = %d, want %d; %+v", rep.ExitCode(), diagnose.ExitError, rep.Checks)
			}
			if msg := rep.Checks[0].Message; !strings.Contains(msg, tc.wantErr) {
				t.Errorf("message %q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}

func TestKernelMismatchDoesNotLoad(t *testing.T) {
	dir := copyTree(t, "debian12")
	c := NewChecker(Config{Root: hostfs.New(dir), Remediate: true}) // native loader
	res, err := c.Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	running, _ := runningRelease()
	if running == debRel {
		t.Skip("the host runs the testdata kernel")
	}
	if res.Reason != ReasonModulesNotLoaded || !strings.Contains(res.Message, "did not load ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh:") ||
		!strings.Contains(res.Message, ErrKernelMismatch.Error()) {
		t.Errorf("got %s: %s", res.Reason, res.Message)
	}
	if len(res.Actions) != 1 || !strings.HasPrefix(res.Actions[0], "wrote /etc/modules-load.d/ipvs.conf") {
		t.Errorf("actions = %v, want only the file write", res.Actions)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	defer f.Close()
	_, err = f.WriteString(s)
	must(t, err)
}

var _ = syscall.EEXIST

func TestMaskedOwnedFileIsNotReplaced(t *testing.T) {
	dir := copyTree(t, "debian12")
	owned := filepath.Join(dir, "etc/modules-load.d/ipvs.conf")
	must(t, os.Symlink("/dev/null", owned))
	c := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}})
	res, err := c.Run(testCtx(t))
	must(t, err)
	if !strings.Contains(res.Message, "did not write /etc/modules-load.d/ipvs.conf: it is a symbolic link to /dev/null") {
		t.Errorf("message: %s", res.Message)
	}
	if target, err := os.Readlink(owned); err != nil || target != "/dev/null" {
		t.Errorf("the mask was replaced: %q %v", target, err)
	}
	if res.Reason != ReasonModulesNotPersisted {
		t.Errorf("reason = %s", res.Reason)
	}
}

// testCtx returns a context whose logger writes through t.Log.
func testCtx(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

// TestSchedulerFuncAskedEveryRun: an agent's modules check follows
// kube-proxy's scheduler as it changes, without being rebuilt.
func TestSchedulerFuncAskedEveryRun(t *testing.T) {
	sched := ""
	c := NewChecker(Config{
		Root:          hostfs.New(filepath.Join("testdata", "debian12")),
		Scheduler:     "rr",
		SchedulerFunc: func(context.Context) string { return sched },
	})
	modulesOf := func() []string {
		t.Helper()
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range res.Findings {
			out = append(out, f.(Finding).Module)
		}
		return out
	}
	tests := []struct {
		sched string
		want  []string
	}{
		{"", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}},
		{"lc", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "ip_vs_lc", "nf_conntrack"}},
		{"rr", []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}},
	}
	for _, tc := range tests {
		sched = tc.sched
		if diff := cmp.Diff(tc.want, modulesOf()); diff != "" {
			t.Errorf("scheduler %q: findings (-want +got):\n%s", tc.sched, diff)
		}
	}
}

// TestRemediateFollowsKubeProxyMode: with kube-proxy configured for and
// running in another mode, a remediating run loads nothing and writes
// nothing (IPVSNotInUse); switched back to IPVS, the next run remediates;
// with IPVS assumed (kube-proxy not reachable), the message says so.
func TestRemediateFollowsKubeProxyMode(t *testing.T) {
	dir := copyTree(t, "debian12")
	owned := filepath.Join(dir, "etc/modules-load.d/ipvs.conf")
	loader := &procLoader{root: dir}
	use := check.IPVSUse{Mode: "nftables", Message: "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"}
	c := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: loader,
		IPVSUse: func(context.Context) check.IPVSUse { return use }})
	res, err := c.Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusSkipped || res.Reason != check.ReasonIPVSNotInUse || res.Message != use.Message || len(res.Actions) > 0 {
		t.Errorf("nftables: %+v", res)
	}
	if len(loader.calls) > 0 {
		t.Errorf("nftables: loaded %v", loader.calls)
	}
	if _, err := os.Stat(owned); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nftables: %s written (%v)", owned, err)
	}

	use = check.IPVSUse{Applies: true, Message: "kube-proxy not reachable at 127.0.0.1:10249: assuming IPVS mode"}
	res, err = c.Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK || !strings.HasSuffix(res.Message, " "+use.Message+".") || len(loader.calls) != 1 {
		t.Errorf("IPVS assumed: %+v, loads %v", res, loader.calls)
	}
	if _, err := os.Stat(owned); err != nil {
		t.Errorf("IPVS assumed: %s not written: %v", owned, err)
	}
}

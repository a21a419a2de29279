// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

func writeIn(t *testing.T, root, p, s string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func linkIn(t *testing.T, root, target, p string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		t.Fatal(err)
	}
}

// TestScanDeclarationsSystemdSemantics pins how systemd-modules-load (systemd
// 252, conf_files_list with no flags) picks and reads files; the guest
// property test checks the same against the real binary.
func TestScanDeclarationsSystemdSemantics(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	writeIn(t, outside, "evil.conf", "ip_vs_outside\n")
	// A dangling link still takes its name: the /usr/lib file is not read.
	linkIn(t, dir, "/nonexistent", "etc/modules-load.d/dangling.conf")
	writeIn(t, dir, "usr/lib/modules-load.d/dangling.conf", "ip_vs_dh\n")
	// A directory named *.conf is not listed: the /usr/lib file is read.
	if err := os.MkdirAll(filepath.Join(dir, "etc/modules-load.d/dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeIn(t, dir, "usr/lib/modules-load.d/dir.conf", "ip_vs_fo\n")
	// A link to a directory takes its name and reads nothing.
	linkIn(t, dir, "/etc", "run/modules-load.d/linkdir.conf")
	writeIn(t, dir, "usr/lib/modules-load.d/linkdir.conf", "ip_vs_lblc\n")
	// Hidden files are not listed.
	writeIn(t, dir, "etc/modules-load.d/.hidden.conf", "ip_vs_nq\n")
	// A relative link to /dev/null masks.
	linkIn(t, dir, "../../dev/null", "etc/modules-load.d/masked.conf")
	writeIn(t, dir, "lib/modules-load.d/masked.conf", "ip_vs_wlc\n")
	// Line ends: CR LF, lone CR, NUL; ';' and '#' comments; whitespace.
	writeIn(t, dir, "etc/modules-load.d/ends.conf", "ip_vs\r\nip_vs_rr\rip_vs_sh\x00ip_vs_wrr\n ; c\n\t# c\n  nf_conntrack  \n")
	// Absolute links resolve inside the root; escaping ones find nothing.
	writeIn(t, dir, "opt/real.conf", "ip_vs_lc\n")
	linkIn(t, dir, "/opt/real.conf", "etc/modules-load.d/abs.conf")
	linkIn(t, dir, filepath.Join(outside, "evil.conf"), "etc/modules-load.d/evil.conf")
	linkIn(t, dir, "../../../../../../../../../outside/evil.conf", "etc/modules-load.d/evil2.conf")
	// Debian's modules.conf -> ../modules, with /etc/modules's own syntax for the direct read.
	writeIn(t, dir, "etc/modules", "ip_vs_sed\n")
	linkIn(t, dir, "../modules", "etc/modules-load.d/modules.conf")

	got, err := ScanDeclarations(hostfs.New(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Declaration{
		{Module: "ip_vs_lc", File: "/etc/modules-load.d/abs.conf", Line: 1},
		{Module: "ip_vs_fo", File: "/usr/lib/modules-load.d/dir.conf", Line: 1},
		{Module: "ip_vs", File: "/etc/modules-load.d/ends.conf", Line: 1},
		{Module: "ip_vs_rr", File: "/etc/modules-load.d/ends.conf", Line: 2},
		{Module: "ip_vs_sh", File: "/etc/modules-load.d/ends.conf", Line: 3},
		{Module: "ip_vs_wrr", File: "/etc/modules-load.d/ends.conf", Line: 4},
		{Module: "nf_conntrack", File: "/etc/modules-load.d/ends.conf", Line: 7},
		{Module: "ip_vs_sed", File: "/etc/modules-load.d/modules.conf", Line: 1},
		{Module: "ip_vs_sed", File: "/etc/modules", Line: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSpecialConfIsAnErrorNotAHang(t *testing.T) {
	dir := copyTree(t, "debian12")
	// A FIFO in the directory is not listed (systemd lists regular files
	// and links only); a link to one is, and cannot be read.
	if err := syscall.Mkfifo(filepath.Join(dir, "etc/modules-load.d/plain-fifo.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "etc/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ScanDeclarations(hostfs.New(dir), nil); err != nil {
		t.Fatalf("a FIFO systemd does not list: %v", err)
	}
	linkIn(t, dir, "/etc/fifo", "etc/modules-load.d/fifo.conf")
	done := make(chan error, 1)
	go func() {
		_, err := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, hostfs.ErrNotRegular) || !strings.Contains(err.Error(), "fifo.conf") {
			t.Errorf("Run error = %v, want ErrNotRegular naming fifo.conf", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the modules check blocked on a FIFO")
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); err == nil {
		t.Error("ipvs.conf was written though the state could not be read")
	}
}

func TestBrokenModuleIndexIsAnErrorNeverAFix(t *testing.T) {
	dep := "modules.dep"
	tests := []struct {
		name    string
		content func(orig string) string
	}{
		{"empty", func(string) string { return "" }},
		{"comments only", func(string) string { return "# nothing\n" }},
		{"cut without a final newline", func(o string) string { return strings.TrimSuffix(o, "\n") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "debian12")
			p := filepath.Join(dir, "lib/modules/6.1.0-56-amd64", dep)
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			owned := filepath.Join(dir, "etc/modules-load.d/ipvs.conf")
			writeIn(t, dir, "etc/modules-load.d/ipvs.conf", "ip_vs\nip_vs_rr\n")
			if err := os.WriteFile(p, []byte(tt.content(string(orig))), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
			if !errors.Is(err, ErrIndexInconsistent) {
				t.Errorf("Run = %s %s, %v; want ErrIndexInconsistent", res.Status, res.Message, err)
			}
			if b, _ := os.ReadFile(owned); string(b) != "ip_vs\nip_vs_rr\n" {
				t.Errorf("ipvs.conf changed: %q", b)
			}
		})
	}
}

func TestMergeStartsFromTheFileSystemdReads(t *testing.T) {
	dir := copyTree(t, "debian12")
	writeIn(t, dir, "usr/lib/modules-load.d/ipvs.conf", "iscsi_tcp\nnbd\nip_vs\n")
	res, err := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK {
		t.Fatalf("after fix: %s %s", res.Status, res.Message)
	}
	b, err := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# ipvs-guard: started from /usr/lib/modules-load.d/ipvs.conf, which this file overrides (systemd-modules-load reads one file of a name).\n" +
		"iscsi_tcp\nnbd\nip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n"
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	// The next run starts from the /etc file and changes nothing.
	res, err = NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
	if err != nil || len(res.Actions) != 0 {
		t.Errorf("second run: %v, actions %q", err, res.Actions)
	}
}

func TestFixUnderLinkedEtcStaysInsideRoot(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := copyTree(t, "debian12")
	if err := os.Rename(filepath.Join(dir, "etc/modules-load.d"), filepath.Join(dir, "etc/mld")); err != nil {
		t.Fatal(err)
	}
	linkIn(t, dir, outside, "etc/modules-load.d")
	res, err := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("--fix wrote outside the root: %v", ents)
	}
	// The link resolves inside the root, to <root>/<outside>, missing: the
	// write fails and says so.
	if !strings.Contains(res.Message, "could not write /etc/modules-load.d/ipvs.conf") {
		t.Errorf("message = %q, want the failed write", res.Message)
	}
	// Once <root>/<outside> exists, the file is written there, as the host would.
	if err := os.MkdirAll(filepath.Join(dir, outside), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("--fix wrote outside the root: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(dir, outside, "ipvs.conf")); err != nil {
		t.Errorf("not written where the host would see it: %v", err)
	}
}

func TestLinkedOwnedFileIsNeitherReadNorPrinted(t *testing.T) {
	dir := copyTree(t, "debian12")
	writeIn(t, dir, "etc/shadow", "root:$6$secret:19000:0:99999:7:::\n")
	linkIn(t, dir, "/etc/shadow", "etc/modules-load.d/ipvs.conf")
	res, err := NewChecker(Config{Root: hostfs.New(dir), Loader: &procLoader{root: dir}}).Run(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	all := res.Message + check.JoinSteps(res.Remediation, "\n")
	if strings.Contains(all, "secret") {
		t.Errorf("the link target's content was printed:\n%s", all)
	}
	if !strings.Contains(all, "symbolic link to /etc/shadow") {
		t.Errorf("remediation does not say the file is a link:\n%s", all)
	}
}

func TestHugeConfIsStreamedOrRefused(t *testing.T) {
	dir := copyTree(t, "debian12")
	big := strings.Repeat("foo_module_name\n", (9<<20)/16)
	writeIn(t, dir, "etc/modules-load.d/big.conf", big+"ip_vs\n")
	decls, err := ScanDeclarations(hostfs.New(dir), isIPVSRelated)
	if err != nil {
		t.Fatal(err)
	}
	if len(decls) != 1 || decls[0].Module != "ip_vs" || decls[0].File != "/etc/modules-load.d/big.conf" {
		t.Errorf("kept %d declarations, want only ip_vs: %v", len(decls), decls[:min(len(decls), 3)])
	}
	f, err := os.Create(filepath.Join(dir, "etc/modules-load.d/huge.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(200 << 20); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	f.Close()
	if _, err := ScanDeclarations(hostfs.New(dir), isIPVSRelated); !errors.Is(err, hostfs.ErrTooLarge) || !strings.Contains(err.Error(), "16 MiB limit for a modules-load.d file") {
		t.Errorf("200 MiB .conf: %v, want ErrTooLarge naming the limit", err)
	}
}

func TestValidateScheduler(t *testing.T) {
	tests := []struct {
		s  string
		ok bool
	}{
		{"", true}, {"rr", true}, {"lc", true}, {"twos", true}, {"mh", true},
		{"nosuch", true}, // well formed: a finding (not in kernel), not a usage error
		{"rr;rm -rf /", false}, {"../x", false}, {strings.Repeat("a", 100000), false},
		{"ftp", false}, {"pe_sip", false}, {"RR", false}, {"1rr", false}, {"rr\x00", false}, {"ip_vs_rr", false},
	}
	for _, tt := range tests {
		if err := ValidateScheduler(tt.s); (err == nil) != tt.ok {
			t.Errorf("ValidateScheduler(%.20q) = %v, want ok %v", tt.s, err, tt.ok)
		}
	}
}

func TestMergeReadsLinesAsSystemdDoes(t *testing.T) {
	in := "ip_vs\rip_vs_rr\x00nf_conntrack_ipv4\nip_vs_wrr\n"
	m := MergeDeclarations([]byte(in), []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"}, map[string]string{"nf_conntrack_ipv4": "not in kernel"})
	want := in + "ip_vs_sh\n"
	if diff := cmp.Diff(want, string(m.Content)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestLoaderModulePathsStayInsideRoot: a modules.dep path climbing out with
// "../" resolves inside the root, so a module file outside it is never
// handed to the kernel.
func TestLoaderModulePathsStayInsideRoot(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "evil.ko")
	if err := os.WriteFile(outside, []byte("\x7fELFevil"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := moduleTree(t, "debian12", debRel, nil)
	dep := filepath.Join(dir, "lib/modules", debRel, "modules.dep")
	b, err := os.ReadFile(dep)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(filepath.Join(dir, "lib/modules", debRel), outside)
	if err := os.WriteFile(dep, append([]byte(rel+":\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	k := &fakeKernel{}
	l, err := newLoader(hostfs.New(dir), debRel, k)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Load(testCtx(t), []string{"evil"})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("loading a module outside the root: %v, want not found inside it", err)
	}
	if len(k.calls) != 0 {
		t.Errorf("the kernel was handed %q", k.calls)
	}
}

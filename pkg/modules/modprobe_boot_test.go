// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// TestModprobeConfigBlocksBootLoading pins what systemd-modules-load
// (libkmod with KMOD_PROBE_APPLY_BLACKLIST, install commands run) does with
// a modules-load.d name that modprobe.d blacklists, replaces with an install
// command or aliases to another module: the module is not loaded at boot,
// so it is not "declared"; the finding says why; --fix neither loads it nor
// drops or comments out the line naming it.
func TestModprobeConfigBlocksBootLoading(t *testing.T) {
	declared := "ip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n"
	tests := []struct {
		name  string
		files map[string]string // host path → content ("->x": a link to x)
		// want maps each blocked module to a substring of its BootBlocked.
		want map[string]string
	}{
		{name: "blacklist by name", files: map[string]string{"/etc/modprobe.d/no-ipvs.conf": "blacklist ip_vs\n"},
			want: map[string]string{"ip_vs": "blacklisted in /etc/modprobe.d/no-ipvs.conf"}},
		{name: "blacklist with a dash, in /lib", files: map[string]string{"/lib/modprobe.d/x.conf": "# off\nblacklist ip-vs-sh\n"},
			want: map[string]string{"ip_vs_sh": "blacklisted in /lib/modprobe.d/x.conf"}},
		{name: "blacklist on the kernel command line", files: map[string]string{"/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro modprobe.blacklist=ip_vs_wrr,foo quiet\n"},
			want: map[string]string{"ip_vs_wrr": "blacklisted in /proc/cmdline"}},
		{name: "install /bin/false blocks the module and its dependants", files: map[string]string{"/usr/lib/modprobe.d/ipvs.conf": "install ip_vs /bin/false\n"},
			want: map[string]string{
				"ip_vs":     "install command in /usr/lib/modprobe.d/ipvs.conf replaces loading it (install ip_vs /bin/false)",
				"ip_vs_rr":  "install command for its dependency ip_vs in /usr/lib/modprobe.d/ipvs.conf",
				"ip_vs_wrr": "dependency ip_vs",
				"ip_vs_sh":  "dependency ip_vs",
			}},
		{name: "install wrapper that still loads it", files: map[string]string{"/etc/modprobe.d/w.conf": "install ip_vs /sbin/modprobe --ignore-install ip_vs $CMDLINE_OPTS && /bin/true\n"}},
		{name: "alias redirects the name", files: map[string]string{"/run/modprobe.d/a.conf": "alias ip_vs veth\n"},
			want: map[string]string{"ip_vs": "alias in /run/modprobe.d/a.conf redirects ip_vs to veth"}},
		{name: "wildcard alias", files: map[string]string{"/etc/modprobe.d/a.conf": "alias ip_vs_*rr dummy\n"},
			want: map[string]string{"ip_vs_rr": "redirects ip_vs_rr to dummy", "ip_vs_wrr": "redirects ip_vs_wrr to dummy"}},
		{name: "alias to itself is no redirect", files: map[string]string{"/etc/modprobe.d/a.conf": "alias ip_vs ip_vs\n"}},
		{name: "blacklisted dependency is still loaded", files: map[string]string{"/etc/modprobe.d/b.conf": "blacklist nf_defrag_ipv6\n"}},
		{name: "first directory wins per file name", files: map[string]string{
			"/usr/lib/modprobe.d/x.conf": "blacklist ip_vs\n", "/etc/modprobe.d/x.conf": "# nothing\n"}},
		{name: "a link to /dev/null masks the name", files: map[string]string{
			"/usr/lib/modprobe.d/x.conf": "blacklist ip_vs\n", "/etc/modprobe.d/x.conf": "->/dev/null"}},
		{name: "a dangling link hides nothing", files: map[string]string{
			"/usr/lib/modprobe.d/x.conf": "blacklist ip_vs\n", "/etc/modprobe.d/x.conf": "->/nonexistent"},
			want: map[string]string{"ip_vs": "blacklisted in /usr/lib/modprobe.d/x.conf"}},
		{name: "only *.conf counts", files: map[string]string{"/etc/modprobe.d/x.conf.bak": "blacklist ip_vs\n", "/etc/modprobe.d/.x.conf": "blacklist ip_vs\n"}},
		{name: "a malformed line is skipped as kmod skips it", files: map[string]string{"/etc/modprobe.d/x.conf": "blacklist\ninstall ip_vs\nblacklist ip_vs_sh\n"},
			want: map[string]string{"ip_vs_sh": "blacklisted in /etc/modprobe.d/x.conf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "debian12")
			must(t, os.WriteFile(filepath.Join(dir, "proc/modules"), nil, 0o644))
			must(t, os.RemoveAll(filepath.Join(dir, "sys/module")))
			must(t, os.RemoveAll(filepath.Join(dir, "etc/modules-load.d")))
			must(t, os.Remove(filepath.Join(dir, "etc/modules")))
			writeIn(t, dir, "etc/modules-load.d/ipvs.conf", declared)
			for p, c := range tt.files {
				if target, ok := strings.CutPrefix(c, "->"); ok {
					linkIn(t, dir, target, p)
				} else {
					writeIn(t, dir, p, c)
				}
			}
			obs, err := Observe(hostfs.New(dir), "rr")
			must(t, err)
			for _, f := range obs.Findings {
				want, blocked := tt.want[f.Module]
				switch {
				case blocked && !strings.Contains(f.BootBlocked, want):
					t.Errorf("%s: BootBlocked %q, want it to contain %q", f.Module, f.BootBlocked, want)
				case blocked && f.Declared:
					t.Errorf("%s: declared, though systemd-modules-load does not load it", f.Module)
				case !blocked && f.BootBlocked != "":
					t.Errorf("%s: BootBlocked %q, want nothing", f.Module, f.BootBlocked)
				case !blocked && f.wanted && !f.Declared:
					t.Errorf("%s: not declared, though ipvs.conf names it", f.Module)
				}
			}

			loader := &procLoader{root: dir}
			res, err := NewChecker(Config{Root: hostfs.New(dir), Scheduler: "rr", Remediate: true, Loader: loader}).Run(testCtx(t))
			must(t, err)
			var asked []string
			for _, c := range loader.calls {
				asked = append(asked, c...)
			}
			for m := range tt.want {
				if contains(asked, m) {
					t.Errorf("--fix asked the loader for %s, which modprobe.d blocks (asked %v)", m, asked)
				}
				if strings.Contains(res.Message, m+" is not loaded by its name: ") {
					// Only an alias keeps it: it loads as a dependency
					// (TestAliasedModuleLoadsAsDependency); no failure.
					if strings.Contains(res.Message, "did not load "+m+": ") {
						t.Errorf("the message says %s is not loaded though it loads as a dependency: %q", m, res.Message)
					}
					continue
				}
				if !strings.Contains(res.Message, "did not load "+m+": ") || !strings.Contains(res.Message, m+" is not loaded at boot: ") {
					t.Errorf("the message does not say why %s is neither loaded nor loaded at boot: %q", m, res.Message)
				}
			}
			if len(tt.want) > 0 {
				if res.Status != check.StatusProblem || res.Reason != ReasonModuleBlocked {
					t.Errorf("status %s reason %s, want problem %s", res.Status, res.Reason, ReasonModuleBlocked)
				}
			} else if res.Status != check.StatusOK {
				t.Errorf("status %s (%s): %s, want ok", res.Status, res.Reason, res.Message)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); string(b) != declared {
				t.Errorf("ipvs.conf changed: %q", b)
			}
			js, err := json.Marshal(res.Findings)
			must(t, err)
			if got := strings.Count(string(js), `"boot_blocked":`); got != len(tt.want) {
				t.Errorf("%d findings with boot_blocked in JSON, want %d: %s", got, len(tt.want), js)
			}
		})
	}
}

// TestBlockedModuleIsNotDeclaredByFix: a blocked module no file names is
// not added to the owned file (systemd would not load it, and an install
// command such as /bin/false would fail systemd-modules-load at boot);
// the rest are.
func TestBlockedModuleIsNotDeclaredByFix(t *testing.T) {
	dir := copyTree(t, "debian12")
	must(t, os.WriteFile(filepath.Join(dir, "proc/modules"), nil, 0o644))
	writeIn(t, dir, "etc/modprobe.d/ipvs-off.conf", "install ip_vs_sh /bin/false\n")
	res, err := NewChecker(Config{Root: hostfs.New(dir), Scheduler: "rr", Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
	must(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
	must(t, err)
	got := activeLines(string(b))
	for _, m := range []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "nf_conntrack"} {
		if !contains(got, m) {
			t.Errorf("%s not declared by --fix: %q", m, b)
		}
	}
	if contains(got, "ip_vs_sh") {
		t.Errorf("--fix declared ip_vs_sh, which an install command replaces: %q", b)
	}
	if !strings.Contains(res.Message, "ip_vs_sh is not loaded at boot: install command in /etc/modprobe.d/ipvs-off.conf") {
		t.Errorf("message %q does not name the install command", res.Message)
	}
	var text []string
	for _, f := range res.Findings {
		text = append(text, f.String())
	}
	if s := strings.Join(text, "\n"); !strings.Contains(s, "ip_vs_sh: NOT LOADED, available, NOT LOADED AT BOOT: install command in /etc/modprobe.d/ipvs-off.conf") {
		t.Errorf("text findings:\n%s", s)
	}
}

func activeLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
			out = append(out, l)
		}
	}
	return out
}

// TestAliasedModuleLoadsAsDependency: with "alias ip_vs veth", kmod and
// ipvs-guard load ip_vs.ko as a dependency of the scheduler modules (a
// dependency is loaded by its modules.dep path, never through an alias),
// while the name ip_vs alone would load veth. The message says exactly
// that, --fix loads ip_vs only through the schedulers, never by its name,
// and reports no failure for it; the declaration file never names it.
func TestAliasedModuleLoadsAsDependency(t *testing.T) {
	dir := moduleTree(t, "debian12", debRel, nil)
	writeIn(t, dir, "etc/modprobe.d/alias.conf", "alias ip_vs veth\n")
	must(t, os.RemoveAll(filepath.Join(dir, "sys/module")))
	k := &fakeKernel{}
	l, err := newLoader(hostfs.New(dir), debRel, k)
	must(t, err)
	res, err := NewChecker(Config{Root: hostfs.New(dir), Scheduler: "rr", Remediate: true, Loader: l}).Run(testCtx(t))
	must(t, err)
	const says = "ip_vs is not loaded by its name: alias in /etc/modprobe.d/alias.conf redirects ip_vs to veth (that module is loaded instead); ipvs-guard does not declare it, and it is loaded only as a dependency of ip_vs_rr, ip_vs_wrr and ip_vs_sh"
	if res.Reason != ReasonModuleBlocked || !strings.Contains(res.Message, says) || strings.Contains(res.Message, "did not load ip_vs:") {
		t.Errorf("%s: %s", res.Reason, res.Message)
	}
	var loadedIPVS, loadedVeth bool
	for _, c := range k.calls {
		loadedIPVS = loadedIPVS || strings.HasPrefix(c, "finit:ip_vs:")
		loadedVeth = loadedVeth || strings.HasPrefix(c, "finit:veth:")
	}
	if !loadedIPVS || loadedVeth {
		t.Errorf("--fix inserted %q: want ip_vs (as a dependency) and no veth", k.calls)
	}
	b, err := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
	must(t, err)
	if got := activeLines(string(b)); contains(got, "ip_vs") || !contains(got, "ip_vs_rr") {
		t.Errorf("declared %q", got)
	}
	js, err := json.Marshal(res.Findings[0])
	must(t, err)
	if !strings.Contains(string(js), `"loaded_as_dependency_of":["ip_vs_rr","ip_vs_wrr","ip_vs_sh"]`) {
		t.Errorf("JSON %s", js)
	}
}

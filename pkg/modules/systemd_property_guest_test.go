// SPDX-License-Identifier: Apache-2.0

//go:build guest

package modules

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// guestWords are the lines of the guest's random trees: modules its kernel
// image ships (IPVS, conntrack, and foreign ones: dummy, veth), stale ones,
// dashes, whitespace, comments and parameters.
var guestWords = []string{
	"ip_vs", "ip_vs_rr", "ip-vs-wrr", "ip_vs_sh", "ip_vs_lc", "nf_conntrack", "dummy", "veth", "  veth  ",
	"\tip_vs", "nf_conntrack_ipv4", "ip_vs_nosuch", "# ip_vs_rr", "; dummy", "#", "", "dummy numdummies=0",
}

// guestModprobeLines are the modprobe.d lines of the guest's random trees:
// blacklists, install commands and aliases of IPVS and foreign modules,
// the --ignore-install wrapper, comments and malformed lines.
var guestModprobeLines = []string{
	"blacklist ip_vs_wrr", "blacklist ip-vs-sh", "blacklist veth", "blacklist nf_defrag_ipv6",
	"install ip_vs_sh /bin/false", "install ip_vs /bin/false", "install dummy /bin/true",
	"install ip_vs_rr /usr/libexec/kmod/modprobe --ignore-install ip_vs_rr",
	"alias ip_vs_rr dummy", "alias ip_vs_w* veth", "alias ip_vs ip_vs", "options ip_vs conn_tab_bits=12",
	"# blacklist ip_vs", "blacklist", "",
}

// guestModprobeDirs are where the random modprobe.d files go (the guest's
// own files there are left alone: ours are named ipvs-guard-test-*.conf).
var guestModprobeDirs = []string{"/etc/modprobe.d", "/run/modprobe.d", "/usr/lib/modprobe.d"}

// genModprobe writes random modprobe.d files of guestModprobeLines, some of
// the same name in two directories (the first wins), some masked with a
// link to /dev/null, some not ending in .conf.
func genModprobe(t *testing.T, r *rand.Rand) {
	t.Helper()
	names := []string{"ipvs-guard-test-a.conf", "ipvs-guard-test-b.conf", "ipvs-guard-test-c.conf.off"}
	for _, d := range guestModprobeDirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			p := filepath.Join(d, n)
			switch r.IntN(5) {
			case 0, 1:
				var b strings.Builder
				for range 1 + r.IntN(3) {
					b.WriteString(guestModprobeLines[r.IntN(len(guestModprobeLines))] + "\n")
				}
				if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			case 2:
				if err := os.Symlink("/dev/null", p); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// clearModprobe removes what genModprobe wrote.
func clearModprobe(t *testing.T) {
	t.Helper()
	for _, d := range guestModprobeDirs {
		ms, _ := filepath.Glob(filepath.Join(d, "ipvs-guard-test-*"))
		for _, m := range ms {
			if err := os.Remove(m); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// loadedRe matches what systemd-modules-load logs for a module it loaded,
// found loaded, or found built in (module-util.c; the same words in systemd
// 247, 252 and 257, the judges of bullseye, bookworm and trixie).
var loadedRe = regexp.MustCompile(`^(?:Inserted module '([^']+)'|Module '([^']+)' is (?:already loaded|built in))`)

// guestBootLoads resets the guest's modules, runs the real
// systemd-modules-load over the guest's own modules-load.d directories, and
// returns the modules it loaded.
func guestBootLoads(t *testing.T) map[string]bool {
	t.Helper()
	guest.ResetModules(t)
	cmd := exec.Command(guest.SystemdModulesLoad)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=debug", "SYSTEMD_LOG_TARGET=console")
	out, _ := cmd.CombinedOutput() // its exit code says nothing about what loaded
	loads := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m := loadedRe.FindStringSubmatch(sc.Text()); m != nil {
			loads[Normalize(m[1]+m[2])] = true
		}
	}
	return loads
}

// clearDecls empties the guest's boot declarations.
func clearDecls(t *testing.T) {
	t.Helper()
	for _, d := range append([]string{"/lib/modules-load.d"}, propertyDirs...) {
		if fi, err := os.Lstat(d); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Remove("/etc/modules"); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// modprobeDump renders the random modprobe.d files for a failure message.
func modprobeDump() string {
	var b strings.Builder
	for _, d := range guestModprobeDirs {
		ms, _ := filepath.Glob(filepath.Join(d, "ipvs-guard-test-*"))
		for _, m := range ms {
			data, _ := os.ReadFile(m)
			fmt.Fprintf(&b, "%s: %q\n", m, data)
		}
	}
	return b.String()
}

type noLoader struct{}

func (noLoader) Load(context.Context, []string) ([]string, error) { return nil, nil }

// TestGuestFixNeverLosesABootModule is the property test in the guest, where
// systemd-modules-load really loads modules into a stock Debian kernel: over
// random modules-load.d trees written to the guest's own /etc, /run and
// /usr/lib, the modules it loads after the fix (diagnose --fix's check,
// loading left to systemd) are a superset of those it loaded before, and
// include every IPVS module that modprobe.d does not block. Random
// modprobe.d files (blacklists, install commands, aliases) go with each
// tree, so systemd-modules-load itself judges which modules they block: a
// module ipvs-guard calls declared must be loaded by it under its name, and
// a module missing after the fix must be one ipvs-guard says modprobe.d
// blocks (boot_blocked). GUEST_PROPERTY_TREES sets the count (default 40).
func TestGuestFixNeverLosesABootModule(t *testing.T) {
	testenv.RequireGuest(t)
	trees := 40
	if s := os.Getenv("GUEST_PROPERTY_TREES"); s != "" {
		trees, _ = strconv.Atoi(s)
	}
	r := rand.New(rand.NewPCG(20, 0))
	desired := Desired("rr", nil)
	t.Cleanup(func() { clearDecls(t); clearModprobe(t); guest.ResetModules(t) })
	losses := 0
	for i := range trees {
		clearDecls(t)
		clearModprobe(t)
		genDecls(t, r, "/", guestWords)
		genModprobe(t, r)
		before := guestBootLoads(t)
		res, err := NewChecker(Config{Root: hostfs.New("/"), Scheduler: "rr", Remediate: true, Loader: noLoader{}}).Run(testCtx(t))
		if err != nil {
			t.Fatalf("tree %d: --fix: %v", i, err)
		}
		after := guestBootLoads(t)
		obs, err := Observe(hostfs.New("/"), "rr")
		if err != nil {
			t.Fatalf("tree %d: observing after the fix: %v", i, err)
		}
		blocked := map[string]string{}
		var unsound []string
		for _, f := range obs.Findings {
			if f.BootBlocked != "" {
				blocked[f.Module] = f.BootBlocked
			}
			if contains(desired, f.Module) && f.Declared && !f.Builtin && !after[f.Module] {
				unsound = append(unsound, f.String())
			}
		}
		var lost, missing []string
		for m := range before {
			if !after[m] {
				lost = append(lost, m)
			}
		}
		for _, m := range desired {
			if !after[m] && blocked[m] == "" {
				missing = append(missing, m)
			}
		}
		if len(unsound) > 0 {
			t.Errorf("tree %d: ipvs-guard calls %q declared, but systemd-modules-load did not load them (loaded %v)\nmodprobe.d:\n%s",
				i, unsound, setOf(after), modprobeDump())
		}
		if len(lost) > 0 || len(missing) > 0 {
			losses++
			b, _ := os.ReadFile(DefaultDeclarationFile)
			t.Errorf("tree %d: lost %v, IPVS modules not loaded at boot %v (blocked: %v)\nbefore %v\nafter  %v\nactions %q\nipvs.conf now %q\nmodprobe.d:\n%s",
				i, lost, missing, blocked, setOf(before), setOf(after), res.Actions, b, modprobeDump())
		}
	}
	t.Logf("%d random trees in the guest, %d with a lost or missing boot module", trees, losses)
}

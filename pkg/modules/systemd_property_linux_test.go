// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// systemdModulesLoad is Debian's systemd-modules-load (systemd 252).
const systemdModulesLoad = "/lib/systemd/systemd-modules-load"

// propertyRelease is the kernel release of the generated trees.
const propertyRelease = "6.1.0-99-amd64"

// propertyShipped are the modules the generated trees' kernel ships.
var propertyShipped = []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "ip_vs_lc", "nf_conntrack", "br_netfilter", "overlay", "iscsi_tcp", "nbd", "loop"}

// propertyWords are the lines the generator draws from: shipped modules,
// stale IPVS ones, dashes, whitespace, comments, parameters.
var propertyWords = []string{
	"ip_vs", "ip_vs_rr", "ip-vs-wrr", "ip_vs_sh", "ip_vs_lc", "nf_conntrack", "br_netfilter", "overlay",
	"iscsi_tcp", "nbd", "loop", "  nbd  ", "\tip_vs", "nf_conntrack_ipv4", "ip_vs_nosuch", "ip_vs_ftp",
	"# ip_vs_rr", "; iscsi_tcp", "#", "", "loop max_loop=64",
}

var propertyEnds = []string{"\n", "\n", "\r\n", "\r", "\x00"}

// propertyDirs are the modules-load.d directories bound into systemd's view
// (/lib is a link to usr/lib, as on Debian 12).
var propertyDirs = []string{"/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d", "/usr/lib/modules-load.d"}

var propertyNames = []string{"a.conf", "ipvs.conf", "k8s.conf", "z.conf", ".hidden.conf", "notes.txt"}

// genContent returns a random modules-load.d file of words.
func genContent(r *rand.Rand, words []string) string {
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteString(propertyEnds[r.IntN(len(propertyEnds))])
	}
	if r.IntN(4) == 0 {
		b.WriteString(words[r.IntN(len(words))]) // no final line end
	}
	return b.String()
}

// genTree writes a random host tree at root: genDecls over propertyWords,
// /lib linked to usr/lib (as on Debian 12), a module index shipping
// propertyShipped, and /proc.
func genTree(t *testing.T, r *rand.Rand, root string) {
	t.Helper()
	genDecls(t, r, root, propertyWords)
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	var dep strings.Builder
	for _, m := range propertyShipped {
		fmt.Fprintf(&dep, "kernel/net/%s.ko:\n", m)
	}
	writeIn(t, root, "usr/lib/modules/"+propertyRelease+"/modules.dep", dep.String())
	writeIn(t, root, "proc/sys/kernel/osrelease", propertyRelease+"\n")
	writeIn(t, root, "proc/modules", "")
}

// genDecls writes random boot declarations at root: the modules-load.d
// directories with files of words, links (to /dev/null, dangling, to
// another directory's file, to a directory), directories named *.conf,
// empty files, and /etc/modules with Debian's modules.conf link. The owned
// file stays a regular file or absent.
func genDecls(t *testing.T, r *rand.Rand, root string, words []string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range propertyDirs {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	var files []string
	for _, d := range propertyDirs {
		for _, n := range propertyNames {
			if r.IntN(3) != 0 {
				continue
			}
			p := filepath.Join(d, n)
			full := filepath.Join(root, p)
			owned := p == DefaultDeclarationFile // the owned file stays a regular file or absent
			switch k := r.IntN(10); {
			case k < 5 || owned:
				must(os.WriteFile(full, []byte(genContent(r, words)), 0o644))
				files = append(files, p)
			case k == 5:
				must(os.Symlink("/dev/null", full))
			case k == 6:
				must(os.Symlink("/nonexistent/"+n, full))
			case k == 7 && len(files) > 0:
				must(os.Symlink(files[r.IntN(len(files))], full))
			case k == 8:
				must(os.Mkdir(full, 0o755))
			default:
				must(os.Symlink("/usr/lib", full))
			}
		}
	}
	if r.IntN(2) == 0 {
		must(os.WriteFile(filepath.Join(root, "etc/modules"), []byte(genContent(r, words)), 0o644))
	}
	if r.IntN(2) == 0 {
		must(os.Symlink("../modules", filepath.Join(root, "etc/modules-load.d/modules.conf")))
	}
}

// systemdLoads runs the real systemd-modules-load in a private mount
// namespace where /etc and the other modules-load.d directories are root's
// (so /etc/modules and Debian's modules.conf link resolve inside the tree,
// whether or not the host has an /etc/modules), and returns the modules it
// would load: each name it tries (its debug log says "Loading module:
// <name>"), normalised, that the tree's kernel ships. The host kernel has
// no modules, so nothing loads.
func systemdLoads(t *testing.T, root string) map[string]bool {
	t.Helper()
	script := `set -e
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /usr/local
mkdir -p /run/modules-load.d /usr/local/lib/modules-load.d
for d in /run/modules-load.d /usr/local/lib/modules-load.d /usr/lib/modules-load.d; do
	mount --bind "$1$d" "$d"
done
mount --bind "$1/etc" /etc
SYSTEMD_LOG_LEVEL=debug SYSTEMD_LOG_TARGET=console ` + systemdModulesLoad + ` || true`
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", root).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-modules-load in a mount namespace: %v\n%s", err, out)
	}
	shipped := map[string]bool{}
	for _, m := range propertyShipped {
		shipped[m] = true
	}
	loads := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Loading module: "); ok && shipped[Normalize(m)] {
			loads[Normalize(m)] = true
		}
	}
	return loads
}

func setOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestFixNeverLosesABootModule is the property test against the real
// systemd-modules-load: over many random trees, the modules it loads after
// `--fix` are a superset of those it loaded before, and include every
// module IPVS mode needs. IPVS_GUARD_PROPERTY_TREES sets the number of
// trees (default 100), IPVS_GUARD_PROPERTY_SEED the seed.
func TestFixNeverLosesABootModule(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := os.Stat(systemdModulesLoad)
	testenv.Require(t, err == nil, systemdModulesLoad+" (Debian's systemd package)")
	_, err = exec.LookPath("unshare")
	testenv.Require(t, err == nil, "unshare (util-linux)")
	if out, err := exec.Command("unshare", "--mount", "true").CombinedOutput(); err != nil {
		testenv.Require(t, false, fmt.Sprintf("mount namespaces: %v %s", err, out))
	}
	trees, seed := 100, uint64(10)
	if s := os.Getenv("IPVS_GUARD_PROPERTY_TREES"); s != "" {
		trees, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("IPVS_GUARD_PROPERTY_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	r := rand.New(rand.NewPCG(seed, 0))
	desired := Desired("rr", nil)
	losses := 0
	for i := range trees {
		root := t.TempDir()
		genTree(t, r, root)
		before := systemdLoads(t, root)
		res, err := NewChecker(Config{Root: hostfs.New(root), Scheduler: "rr", Remediate: true, Loader: &procLoader{root: root}}).Run(testCtx(t))
		if err != nil {
			t.Fatalf("tree %d (seed %d): --fix: %v", i, seed, err)
		}
		after := systemdLoads(t, root)
		var lost, missing []string
		for m := range before {
			if !after[m] {
				lost = append(lost, m)
			}
		}
		for _, m := range desired {
			if !after[m] {
				missing = append(missing, m)
			}
		}
		if len(lost) > 0 || len(missing) > 0 {
			losses++
			b, _ := os.ReadFile(filepath.Join(root, DefaultDeclarationFile))
			t.Errorf("tree %d (seed %d): lost %v, IPVS modules not loaded at boot %v\nbefore %v\nafter  %v\nactions %q, message %q\nipvs.conf now %q",
				i, seed, lost, missing, setOf(before), setOf(after), res.Actions, res.Message, b)
		}
	}
	t.Logf("%d random trees, %d with a lost or missing boot module", trees, losses)
}

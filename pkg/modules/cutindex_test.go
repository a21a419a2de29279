// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// cutTree is a debian12 tree whose module files exist on disk, each with
// suffix (".ko", ".ko.xz", ".ko.zst" or ".ko.gz"), modules.dep naming them.
type cutTree struct {
	dir, modDir string
	dep         string   // the whole modules.dep, paths with suffix
	lines       []string // its lines, each with its "\n"
	declared    string   // the owned file's content before the fix
}

func newCutTree(t *testing.T, suffix string) *cutTree {
	t.Helper()
	dir := copyTree(t, "debian12")
	ct := &cutTree{dir: dir, modDir: filepath.Join(dir, "lib/modules", debRel)}
	orig, err := os.ReadFile(filepath.Join(ct.modDir, "modules.dep"))
	if err != nil {
		t.Fatal(err)
	}
	ct.dep = strings.ReplaceAll(string(orig), ".ko", suffix)
	ct.lines = strings.SplitAfter(ct.dep, "\n")
	if ct.lines[len(ct.lines)-1] == "" {
		ct.lines = ct.lines[:len(ct.lines)-1]
	}
	for _, l := range ct.lines {
		file, _, _ := strings.Cut(l, ":")
		p := filepath.Join(ct.modDir, file)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("\x7fELF module image"), 0o644))
	}
	// Every IPVS module, a foreign one and a genuinely stale one.
	ct.declared = "ip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nip_vs_lc\nnf_conntrack\nnf_conntrack_ipv4\n"
	return ct
}

// onDisk reports whether a module file of name is in the tree.
func (ct *cutTree) onDisk(name string) bool {
	for _, l := range ct.lines {
		file, _, _ := strings.Cut(l, ":")
		if ModuleNameFromPath(file) == name {
			return true
		}
	}
	return false
}

// fixWith writes modules.dep and modules.dep.bin (nil: none), the owned
// file and an empty /proc/modules, runs --fix, and fails when a module whose
// file is on disk was commented out of the owned file.
func (ct *cutTree) fixWith(t *testing.T, dep string, bin []byte, what string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(ct.modDir, "modules.dep"), []byte(dep), 0o644))
	binPath := filepath.Join(ct.modDir, "modules.dep.bin")
	if bin == nil {
		if err := os.Remove(binPath); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	} else {
		must(t, os.WriteFile(binPath, bin, 0o644))
	}
	owned := filepath.Join(ct.dir, "etc/modules-load.d/ipvs.conf")
	must(t, os.WriteFile(owned, []byte(ct.declared), 0o644))
	must(t, os.WriteFile(filepath.Join(ct.dir, "proc/modules"), nil, 0o644))
	must(t, os.RemoveAll(filepath.Join(ct.dir, "sys/module")))
	res, err := NewChecker(Config{Root: hostfs.New(ct.dir), Scheduler: "lc", Remediate: true, Loader: &procLoader{root: ct.dir}}).Run(testCtx(t))
	b, rerr := os.ReadFile(owned)
	must(t, rerr)
	for _, l := range strings.Split(string(b), "\n") {
		body, ok := strings.CutPrefix(strings.TrimSpace(l), "#")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSpace(body), " ")
		if strings.Contains(ct.declared, name+"\n") && ct.onDisk(name) {
			t.Errorf("%s: --fix commented out %s, whose module file is on disk (Run: status %s, err %v, message %q)\nipvs.conf now %q",
				what, name, res.Status, err, res.Message, b)
		}
	}
}

// TestCutModulesDepNeverCommentsOutAModuleOnDisk cuts modules.dep at every
// line boundary, with no modules.dep.bin or a corrupt one, for each module
// file suffix: --fix must never comment out a module whose file is under
// /lib/modules/<release>.
func TestCutModulesDepNeverCommentsOutAModuleOnDisk(t *testing.T) {
	bins := []struct {
		name string
		data []byte
	}{
		{"no modules.dep.bin", nil},
		{"corrupt modules.dep.bin", []byte("\xb0\x07\xf4\x57garbage")},
		{"empty modules.dep.bin", []byte{}},
	}
	for _, suffix := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		t.Run(suffix, func(t *testing.T) {
			ct := newCutTree(t, suffix)
			for _, bin := range bins {
				for k := 1; k < len(ct.lines); k++ {
					ct.fixWith(t, strings.Join(ct.lines[:k], ""), bin.data, bin.name+", first "+strconv.Itoa(k)+" lines")
				}
			}
		})
	}
}

// TestStaleStillCommentedOutWhenIndexIsWhole keeps the repair the rule above
// must not break: with the whole modules.dep, nf_conntrack_ipv4 (no such
// module on Debian 12, no file) is commented out.
func TestStaleStillCommentedOutWhenIndexIsWhole(t *testing.T) {
	ct := newCutTree(t, ".ko")
	ct.fixWith(t, ct.dep, nil, "whole modules.dep")
	b, err := os.ReadFile(filepath.Join(ct.dir, "etc/modules-load.d/ipvs.conf"))
	must(t, err)
	if !strings.Contains(string(b), "# nf_conntrack_ipv4  # ipvs-guard: not in kernel") {
		t.Errorf("nf_conntrack_ipv4 not commented out with a whole index: %q", b)
	}
}

// FuzzCutModulesDep cuts modules.dep where the fuzzer says, with a
// modules.dep.bin of the fuzzer's bytes (or none): --fix never comments out
// a module whose file is on disk. Each input builds a real directory tree,
// so hack/fuzz.sh runs fewer of them:
// fuzz budget: 500x
func FuzzCutModulesDep(f *testing.F) {
	f.Add(uint16(22), uint8(0), false, []byte(nil))
	f.Add(uint16(31), uint8(1), true, []byte("\xb0\x07\xf4\x57\x00\x02\x00\x01\x00\x00\x00\x0c"))
	f.Add(uint16(5), uint8(3), true, []byte{})
	f.Fuzz(func(t *testing.T, cut uint16, suffix uint8, withBin bool, bin []byte) {
		sfx := moduleSuffixes[int(suffix)%len(moduleSuffixes)]
		ct := newCutTree(t, sfx)
		k := int(cut) % len(ct.lines)
		if k == 0 {
			k = 1
		}
		if !withBin {
			bin = nil
		} else if bin == nil {
			bin = []byte{}
		}
		ct.fixWith(t, strings.Join(ct.lines[:k], ""), bin, "first "+strconv.Itoa(k)+" lines")
	})
}

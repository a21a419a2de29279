// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"strings"
	"testing"
)

// seedTrees are the captured trees whose files seed every fuzz target.
var seedTrees = []struct{ tree, rel string }{
	{"debian12", debRel}, {"rocky8", rockyRel}, {"centos7", centosRel}, {"ubuntu2404", ubuRel},
}

func addSeeds(f *testing.F, file func(tree, rel string) string) {
	for _, s := range seedTrees {
		f.Add(readTestdata(f, file(s.tree, s.rel)))
	}
}

func kernelFile(name string) func(tree, rel string) string {
	return func(tree, rel string) string { return tree + "/lib/modules/" + rel + "/" + name }
}

func FuzzParseProcModules(f *testing.F) {
	addSeeds(f, func(tree, _ string) string { return tree + "/proc/modules" })
	f.Add([]byte("ip_vs 184320 - - Live 0x0 (OE)\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mods, err := ParseProcModules(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, m := range mods {
			if !validModuleName(m.Name) || strings.Contains(m.Name, "-") {
				t.Fatalf("parsed invalid name %q", m.Name)
			}
		}
	})
}

func FuzzParseModulesDep(f *testing.F) {
	addSeeds(f, kernelFile("modules.dep"))
	f.Add([]byte("kernel/a.ko: kernel/b.ko.xz\nkernel/net/x"))
	f.Add([]byte("k/a-b.ko:\nk/a_b.ko: k/c.ko\nk/a.ko:\n k/ab.ko :\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The compact index finds the line the map keeps, for every name.
		lines, err := indexModulesDep(string(b))
		ix, ixErr := newDepIndex(string(b))
		if (err == nil) != (ixErr == nil) {
			t.Fatalf("map: %v, index: %v", err, ixErr)
		}
		if ix.len() != len(lines) {
			t.Fatalf("index of %d modules, map of %d", ix.len(), len(lines))
		}
		for name, line := range lines {
			if got, ok := ix.lookup(name); !ok || got != line {
				t.Fatalf("lookup(%q) = %q, %v; want %q", name, got, ok, line)
			}
		}
		for i := 1; i < ix.len(); i++ {
			if ix.name(i-1) >= ix.name(i) {
				t.Fatalf("index not sorted at %d: %q, %q", i, ix.name(i-1), ix.name(i))
			}
		}
		deps, err := ParseModulesDep(bytes.NewReader(b))
		if err != nil {
			return
		}
		for name, e := range deps {
			if ModuleNameFromPath(e.Path) != name {
				t.Fatalf("entry %q has path %q", name, e.Path)
			}
			for _, d := range e.Deps {
				if ModuleNameFromPath(d) == "" {
					t.Fatalf("dependency %q is no module", d)
				}
			}
		}
	})
}

func FuzzParseModulesBuiltin(f *testing.F) {
	addSeeds(f, kernelFile("modules.builtin"))
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := ParseModulesBuiltin(bytes.NewReader(b))
		if err != nil {
			return
		}
		for n := range set {
			if !validModuleName(n) {
				t.Fatalf("invalid builtin name %q", n)
			}
		}
	})
}

func FuzzParseModulesSoftdep(f *testing.F) {
	addSeeds(f, kernelFile("modules.softdep"))
	f.Add([]byte("softdep a pre: b \\\n post: c\nsoftdep d e\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseModulesSoftdep(bytes.NewReader(b))
		if err != nil {
			return
		}
		for m, d := range s {
			for _, x := range append(append([]string{}, d.Pre...), d.Post...) {
				if x == "pre:" || x == "post:" || strings.Contains(x, "-") {
					t.Fatalf("softdep %s holds %q", m, x)
				}
			}
		}
	})
}

func FuzzParseModulesAlias(f *testing.F) {
	addSeeds(f, kernelFile("modules.alias"))
	f.Add([]byte("alias pci:v*d*sv*[!a-]x* m\nalias [ m\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		as, err := ParseModulesAlias(bytes.NewReader(b))
		if err != nil {
			return
		}
		names := []string{"crc32c"}
		for i, a := range as {
			// Matching must terminate and never panic, whatever the pattern.
			_ = a.Match(a.Pattern)
			_ = a.Match("crc32c")
			if !validModuleName(a.Module) {
				t.Fatalf("alias to invalid module %q", a.Module)
			}
			if i < 4 {
				names = append(names, a.Pattern)
			}
		}
		// The loader's fast scan must agree with the parser (depmod writes
		// no continuation lines, so inputs with them are left out).
		if bytes.Contains(b, []byte("\\")) {
			return
		}
		for _, n := range names {
			if p, s := resolveAlias(as, n), scanAliases(string(b), n); !equalStrings(p, s) {
				t.Fatalf("alias %q: parser %v, scan %v", n, p, s)
			}
		}
	})
}

func FuzzParseModulesLoad(f *testing.F) {
	for _, s := range []string{"rocky8/etc/modules-load.d/ipvs.conf", "ubuntu2404/etc/modules", "debian12/etc/modules", "ubuntu2404/usr/lib/modules-load.d/fwupd-msr.conf"} {
		f.Add(readTestdata(f, s), strings.HasSuffix(s, "/etc/modules"))
	}
	f.Add([]byte("# x\r\n; y\r\n  ip-vs \r\n"), false)
	f.Fuzz(func(t *testing.T, b []byte, etc bool) {
		ds, err := ParseModulesLoad(bytes.NewReader(b), etc)
		if err != nil {
			return
		}
		for _, d := range ds {
			if d.Module == "" || strings.HasPrefix(d.Module, "#") || d.Line < 1 {
				t.Fatalf("bad declaration %+v", d)
			}
		}
	})
}

// FuzzMergeDeclarations checks the merge writer's promises on any input:
// every line that is not a stale declaration survives byte for byte, every
// wanted module ends up declared, and merging again changes nothing.
func FuzzMergeDeclarations(f *testing.F) {
	f.Add(readTestdata(f, "rocky8/etc/modules-load.d/ipvs.conf"))
	f.Add([]byte("# ours\r\nbr_netfilter\r\nnf_conntrack_ipv4\r\nip_vs"))
	f.Add([]byte(""))
	want := []string{"ip_vs", "ip_vs_rr", "nf_conntrack"}
	stale := map[string]string{"nf_conntrack_ipv4": "not in kernel 6.1.0-56-amd64"}
	f.Fuzz(func(t *testing.T, in []byte) {
		m := MergeDeclarations(in, want, stale)
		for _, l := range bytes.SplitAfter(in, []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			if name, ok := declaredModule(string(bytes.TrimRight(l, "\r\n")), false); ok {
				if _, isStale := stale[name]; isStale {
					continue
				}
			}
			if !bytes.Contains(m.Content, bytes.TrimRight(l, "\r\n")) {
				t.Fatalf("line %q lost", l)
			}
		}
		ds, err := ParseModulesLoad(bytes.NewReader(m.Content), false)
		if err != nil {
			return
		}
		got := map[string]bool{}
		for _, d := range ds {
			got[d.Module] = true
		}
		for _, w := range want {
			if !got[w] {
				t.Fatalf("%s not declared in %q", w, m.Content)
			}
		}
		if again := MergeDeclarations(m.Content, want, stale); again.Changed {
			t.Fatalf("not idempotent: %q → %q", m.Content, again.Content)
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzWrittenByIPVSGuard: any content is judged without panicking; content
// judged ipvs-guard's is exactly its header and lines it writes, and
// ipvs-guard's own output for any scheduler is always judged its own.
func FuzzWrittenByIPVSGuard(f *testing.F) {
	f.Add([]byte(newFileHeader+"ip_vs\nip_vs_rr\nnf_conntrack\n"), "lc")
	f.Add([]byte(newFileHeader+"ip_vs\nbr_netfilter\n"), "rr")
	f.Add([]byte("ip_vs\n"), "sh")
	f.Add([]byte(strings.ReplaceAll(newFileHeader, "\n", "\r\n")+"ip_vs\r\n"), "wrr")
	f.Add([]byte(newFileHeader+"ip_vs\n# ip_vs_rr  # ipvs-guard: not in kernel 6.1.0\nnf_conntrack\n# DO NOT REMOVE\n"), "mh")
	f.Fuzz(func(t *testing.T, b []byte, sched string) {
		if WrittenByIPVSGuard(b) {
			rest, ok := strings.CutPrefix(string(b), newFileHeader)
			if !ok {
				t.Fatalf("judged ipvs-guard's without its header: %q", b)
			}
			for _, l := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
				if m, ok := ownLine(l); !ok || (l != m && !strings.HasPrefix(l, "# "+m+staleMark)) {
					t.Fatalf("judged ipvs-guard's with a line it does not write (%q): %q", l, b)
				}
			}
		}
		if ValidateScheduler(sched) != nil || sched == "" {
			return
		}
		own := MergeDeclarations(nil, Desired(sched, nil), nil).Content
		if !WrittenByIPVSGuard(own) {
			t.Fatalf("ipvs-guard's own file not judged its own:\n%s", own)
		}
	})
}

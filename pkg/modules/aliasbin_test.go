// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// The testdata .bin files are depmod's own output (hack/gen-aliasbin-testdata.sh).
const (
	aliasBinDir    = "aliasbin"
	debAliasBinDir = "debian12/lib/modules/" + debRel
)

// aliasOracle resolves names like resolveAlias over the parsed text file,
// without matching every pattern: patterns are bucketed by their literal
// part before the first wildcard, and only buckets whose key is a prefix of
// the name are matched. File order is kept.
type aliasOracle struct {
	byPrefix map[string][]int
	aliases  []Alias
}

func newAliasOracle(t testing.TB, text []byte) *aliasOracle {
	t.Helper()
	as, err := ParseModulesAlias(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	o := &aliasOracle{byPrefix: map[string][]int{}, aliases: as}
	for i, a := range as {
		lit := a.Pattern
		if j := strings.IndexAny(lit, "*?["); j >= 0 {
			lit = lit[:j]
		}
		o.byPrefix[lit] = append(o.byPrefix[lit], i)
	}
	return o
}

func (o *aliasOracle) resolve(name string) []string {
	n := normalizeAlias(name)
	var idx []int
	for i := 0; i <= len(n); i++ {
		idx = append(idx, o.byPrefix[n[:i]]...)
	}
	sort.Ints(idx)
	sub := make([]Alias, 0, len(idx))
	for _, i := range idx {
		sub = append(sub, o.aliases[i])
	}
	return resolveAlias(sub, name)
}

// probeNames returns names to resolve: concrete names each alias pattern
// matches (wildcards filled in two ways), and the patterns without
// wildcards. Names holding wildcard characters are left out: kmod's trie
// search (and so resolveAliasBin) also takes a '*', '?' or '[' in the name
// literally where the trie stores it as a child label, which fnmatch over
// the text never does — no module or alias name has them.
func probeNames(t testing.TB, text []byte) []string {
	t.Helper()
	as, err := ParseModulesAlias(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"", "crc32c", "crc32c-intel", "crypto-crc32c", "net-pf-16-proto-16-family-IPVS", "nosuch", "pat5x", "pat-y", "abc-def", "xb", "xa"}
	for _, a := range as {
		names = append(names, a.Pattern, concrete(a.Pattern, ""), concrete(a.Pattern, "Z9-"))
	}
	out := names[:0]
	for _, n := range names {
		if !strings.ContainsAny(n, "*?[") {
			out = append(out, n)
		}
	}
	return out
}

// concrete fills a pattern's wildcards: '*' with star, '?' with 'q', a
// bracket expression with its first character.
func concrete(pattern, star string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			b.WriteString(star)
		case '?':
			b.WriteByte('q')
		case '[':
			end := strings.IndexByte(pattern[i+1:], ']')
			if end < 1 {
				b.WriteByte(c)
				continue
			}
			set := pattern[i+1 : i+1+end]
			if set[0] == '!' || set[0] == '^' {
				b.WriteByte('~')
			} else {
				b.WriteByte(set[0])
			}
			i += end + 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func readAliasBin(t testing.TB, dir string) *binIndex {
	t.Helper()
	x, err := parseBinIndex(readTestdata(t, dir+"/modules.alias.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestAliasBinResolve(t *testing.T) {
	x := readAliasBin(t, aliasBinDir)
	tests := []struct {
		name string
		want []string
	}{
		// Several modules per alias, in depmod's module order (first
		// appearance in aliases.in: catchall_mod comes before aa_second,
		// uas and e1000e); the wildcard keys under the literal path are
		// all found.
		{"crc32c", []string{"crc32c_intel", "crc32c_generic", "crc32c_wild", "crc32c_q", "crc32c_bracket", "catchall_mod"}},
		{"crypto-crc32c", []string{"crc32c_intel", "crc32c_generic", "catchall_mod"}},
		{"crc32c-intel", []string{"crc32c_intel", "crc32c_wild", "catchall_mod"}},
		{"dup-alias", []string{"zz_first", "catchall_mod", "aa_second"}},
		{"multi-x", []string{"multi_mod", "catchall_mod"}},
		{"pat7x", []string{"bracket_mod", "catchall_mod"}},
		{"patzy", []string{"question_mod", "catchall_mod"}},
		{"the-wild-start", []string{"star_mod", "catchall_mod"}},
		{"abc-def", []string{"dashbracket_mod", "catchall_mod"}},
		{"abc_def", []string{"dashbracket_mod", "catchall_mod"}},
		{"preXfix", []string{"prefix_mod", "catchall_mod"}},
		{"xb", []string{"negate_mod", "catchall_mod"}},
		{"xa", []string{"catchall_mod"}},
		{"net-pf-16-proto-16-family-IPVS", []string{"ip_vs", "netpf_mod", "catchall_mod"}},
		{"usb:v13FDp3940d01xxdcAdscBdpCicDiscEipFinG", []string{"catchall_mod", "uas", "usb_storage"}},
		{"pci:v00008086d000010D3sv00008086sd0000A01Fbc02sc00i00", []string{"catchall_mod", "e1000e"}},
		{"", []string{"catchall_mod"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveAliasBin(x, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestAliasBinMatchesText resolves every alias of the depmod-written test
// trees, and concrete names they match, through the trie and through the
// text: same modules, same order.
func TestAliasBinMatchesText(t *testing.T) {
	for _, dir := range []string{aliasBinDir, debAliasBinDir} {
		t.Run(dir, func(t *testing.T) {
			text := readTestdata(t, dir+"/modules.alias")
			x := readAliasBin(t, dir)
			o := newAliasOracle(t, text)
			for _, name := range probeNames(t, text) {
				got, err := resolveAliasBin(x, name)
				if err != nil {
					t.Fatalf("%q: %v", name, err)
				}
				if diff := cmp.Diff(scanAliases(string(text), name), got); diff != "" {
					t.Errorf("%q: trie differs from text scan (-scan +trie):\n%s", name, diff)
				}
				if diff := cmp.Diff(o.resolve(name), got); diff != "" {
					t.Errorf("%q: trie differs from parsed aliases (-parse +trie):\n%s", name, diff)
				}
			}
		})
	}
}

// TestAliasBinRealDebian does the same over the real, complete Debian
// modules.alias(.bin) pair (26,000 aliases) of the kernel the unit tier
// unpacks (realDebianModules); the testdata pairs cover the same code paths
// on a laptop without it.
func TestAliasBinRealDebian(t *testing.T) {
	dir := realDebianModules(t)
	text, err := os.ReadFile(filepath.Join(dir, "modules.alias"))
	must(t, err)
	bin, err := os.ReadFile(filepath.Join(dir, "modules.alias.bin"))
	must(t, err)
	x, err := parseBinIndex(bin)
	must(t, err)
	o := newAliasOracle(t, text)
	names := probeNames(t, text)
	for i, name := range names {
		got, err := resolveAliasBin(x, name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if diff := cmp.Diff(o.resolve(name), got); diff != "" {
			t.Errorf("%q: trie differs from parsed aliases (-parse +trie):\n%s", name, diff)
		}
		// The text scan reads the whole file per name: sample it.
		if i%997 == 0 || i < 12 {
			if diff := cmp.Diff(scanAliases(string(text), name), got); diff != "" {
				t.Errorf("%q: trie differs from text scan (-scan +trie):\n%s", name, diff)
			}
		}
	}
	if got, _ := resolveAliasBin(x, "crc32c"); !cmp.Equal(got, []string{"crc32c_intel", "crc32c_generic"}) {
		t.Errorf("crc32c resolves to %v", got)
	}
}

// realDebianModules returns the lib/modules/<debRel> directory of the real
// Debian kernel package the unit tier unpacks (hack/test-unit.sh sets
// IPVS_GUARD_DEBIAN_MODULES); without it the test is skipped, failed under
// CI=true.
func realDebianModules(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("IPVS_GUARD_DEBIAN_MODULES")
	testenv.Require(t, dir != "", "IPVS_GUARD_DEBIAN_MODULES: the unpacked "+debRel+" kernel (hack/test-unit.sh sets it)")
	if filepath.Base(dir) != debRel {
		testenv.Require(t, false, fmt.Sprintf("IPVS_GUARD_DEBIAN_MODULES is %s, not kernel %s", dir, debRel))
	}
	_, err := os.Stat(filepath.Join(dir, "modules.alias.bin"))
	testenv.Require(t, err == nil, fmt.Sprintf("the unpacked %s kernel: %v", debRel, err))
	return dir
}

// binFile assembles an index file: header with root, then body bytes laid
// out from offset 12.
func binFile(root uint32, body ...any) []byte {
	b := binary.BigEndian.AppendUint32(nil, binIndexMagic)
	b = binary.BigEndian.AppendUint32(b, 0x00020001)
	b = binary.BigEndian.AppendUint32(b, root)
	for _, v := range body {
		switch v := v.(type) {
		case uint32:
			b = binary.BigEndian.AppendUint32(b, v)
		case string:
			b = append(b, v...)
		case byte:
			b = append(b, v)
		}
	}
	return b
}

func TestAliasBinMalformed(t *testing.T) {
	good := readTestdata(t, aliasBinDir+"/modules.alias.bin")
	flip := func(off int, v uint32) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint32(b[off:], v)
		return b
	}
	// A cycle: the root's children '*' to 'c' are all the root itself.
	cyc := binFile(binNodeChilds|12, byte('*'), byte('c'))
	for c := '*'; c <= 'c'; c++ {
		cyc = binary.BigEndian.AppendUint32(cyc, binNodeChilds|12)
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short header", good[:11]},
		{"bad magic", flip(0, 0xB007FA57)},
		{"bad major version", flip(4, 0x00030001)},
		{"root outside file", flip(8, binNodeChilds|0x0FFFFFF0)},
		{"root inside header", flip(8, binNodeChilds|4)},
		{"truncated", good[:len(good)/2]},
		{"unterminated prefix", binFile(binNodePrefix|12, "abc")},
		{"inverted child range", binFile(binNodeChilds|12, byte('z'), byte('a'))},
		{"truncated children", binFile(binNodeChilds|12, byte('a'), byte('z'), uint32(0))},
		{"cycle", cyc},
		{"huge value count", binFile(binNodeValues|12, uint32(0xFFFFFFFF), uint32(1), "m\x00")},
		{"unterminated value", binFile(binNodeValues|12, uint32(1), uint32(1), "mod")},
		{"child outside file", binFile(binNodeChilds|12, byte('c'), byte('c'), uint32(binNodeValues|0x0FFFFFFF))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := parseBinIndex(tc.data)
			if err == nil {
				_, err = resolveAliasBin(x, "crc32c")
			}
			if err == nil {
				_, err = resolveAliasBin(x, "")
			}
			if !errors.Is(err, errBinIndex) {
				t.Errorf("err = %v, want a malformed-index error", err)
			}
		})
	}
}

// TestLoaderAliasBin checks the loader resolves aliases through
// modules.alias.bin, and through the text file when the .bin is missing or
// malformed, with the same result.
func TestLoaderAliasBin(t *testing.T) {
	want := []string{"finit:crc32c_intel::0", "finit:crc32c_generic::0", "finit:libcrc32c::0",
		"finit:nf_defrag_ipv4::0", "finit:nf_defrag_ipv6::0", "finit:nf_conntrack::0", "finit:ip_vs::0"}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"bin", func(*testing.T, string) {}},
		{"bin only (text removed)", func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, "modules.alias"))) }},
		{"text only (bin removed)", func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, "modules.alias.bin"))) }},
		{"malformed bin falls back to text", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "modules.alias.bin"), binFile(binNodePrefix|12, "crc"), 0o644))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := moduleTree(t, "debian12", debRel, nil)
			tc.setup(t, filepath.Join(root, "lib/modules", debRel))
			k := &fakeKernel{}
			l, err := newLoader(hostfs.New(root), debRel, k)
			must(t, err)
			if _, err := l.Load(context.Background(), []string{"net-pf-16-proto-16-family-IPVS"}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, k.calls); diff != "" {
				t.Errorf("syscalls (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzAliasBin(f *testing.F) {
	for _, d := range []string{aliasBinDir, debAliasBinDir} {
		b := readTestdata(f, d+"/modules.alias.bin")
		f.Add(b, "crc32c")
		f.Add(b, "pat?x")
		f.Add(b[:len(b)-7], "dup-alias")
	}
	f.Add(binFile(binNodeChilds|12, byte('*'), byte('*'), uint32(binNodeChilds|12)), "a")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		x, err := parseBinIndex(b)
		if err != nil {
			if !errors.Is(err, errBinIndex) {
				t.Fatalf("error %v does not wrap errBinIndex", err)
			}
			return
		}
		mods, err := resolveAliasBin(x, name)
		if err != nil {
			if !errors.Is(err, errBinIndex) {
				t.Fatalf("error %v does not wrap errBinIndex", err)
			}
			return
		}
		for i, m := range mods {
			if !validModuleName(m) || contains(mods[:i], m) {
				t.Fatalf("bad or duplicate module %q in %q", m, mods)
			}
		}
	})
}

// BenchmarkAliasLookup resolves the softdep alias the IPVS set needs
// (crc32c) through the real Debian modules.alias.bin and through the text
// modules.alias, each already in memory, as the loader does after its first
// lookup.
func BenchmarkAliasLookup(b *testing.B) {
	dir := realDebianModules(b)
	text, err := os.ReadFile(filepath.Join(dir, "modules.alias"))
	must(b, err)
	x, err := readBinIndex(hostfs.New(dir), "/modules.alias.bin")
	must(b, err)
	for _, name := range []string{"crc32c", "net-pf-16-proto-16-family-IPVS"} {
		b.Run("bin/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := resolveAliasBin(x, name); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("text/"+name, func(b *testing.B) {
			s := string(text)
			for b.Loop() {
				scanAliases(s, name)
			}
		})
	}
	b.Run("bin/read+parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := readBinIndex(hostfs.New(dir), "/modules.alias.bin"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("text/read", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.ReadFile(filepath.Join(dir, "modules.alias")); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAliasBinAgreesWithKmod asks kmod's own modprobe (-R, resolve only:
// nothing is loaded) to resolve a sample of real aliases over the cached
// Debian tree, with no modprobe.d, and compares with resolveAliasBin: same
// modules, same order. Names that are modules themselves are left out (kmod
// answers those before looking at aliases, as the loader does).
func TestAliasBinAgreesWithKmod(t *testing.T) {
	dir := realDebianModules(t)
	modprobe, err := exec.LookPath("modprobe")
	if err != nil {
		modprobe, err = exec.LookPath("/usr/sbin/modprobe")
	}
	testenv.Require(t, err == nil, "kmod's modprobe (Debian's kmod package)")
	text, err := os.ReadFile(filepath.Join(dir, "modules.alias"))
	must(t, err)
	x, err := readBinIndex(hostfs.New(dir), "/modules.alias.bin")
	must(t, err)
	ix, err := ReadIndex(hostfs.New(filepath.Join(dir, "../../..")), debRel)
	must(t, err)
	conf := t.TempDir()
	names := probeNames(t, text)
	n := 0
	for i := 0; i < len(names); i += 97 {
		name := names[i]
		if name == "" || strings.HasPrefix(name, "-") || ix.Loadable(Normalize(name)) || ix.IsBuiltin(Normalize(name)) {
			continue
		}
		out, err := exec.Command(modprobe, "-C", conf, "-d", filepath.Join(dir, "../../.."), "-S", debRel, "-R", name).Output()
		var kmod []string // without the duplicates kmod prints when several patterns match
		if err == nil {
			for _, m := range strings.Fields(string(out)) {
				if !contains(kmod, m) {
					kmod = append(kmod, m)
				}
			}
		}
		got, err := resolveAliasBin(x, name)
		must(t, err)
		if diff := cmp.Diff(kmod, got); diff != "" {
			t.Errorf("%q: (-kmod +trie):\n%s", name, diff)
		}
		n++
	}
	if n < 100 {
		t.Fatalf("only %d names compared", n)
	}
	t.Logf("%d names resolved alike by kmod's modprobe -R and the trie", n)
}

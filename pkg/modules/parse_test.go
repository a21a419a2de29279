// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readTestdata(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	debRel    = "6.1.0-56-amd64"
	rockyRel  = "4.18.0-553.el8_10.x86_64"
	centosRel = "3.10.0-1160.el7.x86_64"
	ubuRel    = "6.8.0-31-generic"
)

func TestParseProcModules(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []ProcModule
		wantErr string
	}{
		{name: "debian line", in: "ip_vs 184320 6 ip_vs_sh,ip_vs_wrr,ip_vs_rr, Live 0xffffffffc0a2b000\n",
			want: []ProcModule{{Name: "ip_vs", Size: 184320, RefCount: 6, UsedBy: []string{"ip_vs_sh", "ip_vs_wrr", "ip_vs_rr"}, State: "Live"}}},
		{name: "no users, tainted", in: "vboxdrv 565248 2 - Live 0x0000000000000000 (OE)\n",
			want: []ProcModule{{Name: "vboxdrv", Size: 565248, RefCount: 2, State: "Live"}}},
		{name: "no unload support", in: "ip_vs 184320 - - Live 0x0\n",
			want: []ProcModule{{Name: "ip_vs", Size: 184320, RefCount: -1, State: "Live"}}},
		{name: "dash in name normalised", in: "crc32c-intel 24576 1 - Live 0x0\n",
			want: []ProcModule{{Name: "crc32c_intel", Size: 24576, RefCount: 1, State: "Live"}}},
		{name: "empty", in: "", want: nil},
		{name: "too few fields", in: "ip_vs 184320\n", wantErr: "line 1: want at least"},
		{name: "bad size", in: "ip_vs big 1 - Live 0x0\n", wantErr: "line 1: size"},
		{name: "garbage", in: "ip_vs 1 1 - Live 0x0\nfoo/bar 1 1\n", wantErr: "line 2: invalid module name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcModules(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, tree := range []string{"debian12", "rocky8", "centos7", "ubuntu2404"} {
		t.Run(tree, func(t *testing.T) {
			mods, err := ParseProcModules(strings.NewReader(string(readTestdata(t, tree+"/proc/modules"))))
			if err != nil || len(mods) < 10 {
				t.Fatalf("got %d modules, err %v", len(mods), err)
			}
		})
	}
}

func TestParseModulesDep(t *testing.T) {
	deps, err := ParseModulesDep(strings.NewReader(string(readTestdata(t, "debian12/lib/modules/"+debRel+"/modules.dep"))))
	if err != nil {
		t.Fatal(err)
	}
	want := DepEntry{Name: "ip_vs", Path: "kernel/net/netfilter/ipvs/ip_vs.ko", Deps: []string{
		"kernel/net/netfilter/nf_conntrack.ko", "kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko",
		"kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko", "kernel/lib/libcrc32c.ko"}}
	if diff := cmp.Diff(want, deps["ip_vs"]); diff != "" {
		t.Errorf("ip_vs (-want +got):\n%s", diff)
	}
	if e, ok := deps["crc32c_intel"]; !ok || e.Path != "kernel/arch/x86/crypto/crc32c-intel.ko" {
		t.Errorf("crc32c-intel.ko should be module crc32c_intel, got %+v", e)
	}
	xz, err := ParseModulesDep(strings.NewReader(string(readTestdata(t, "rocky8/lib/modules/"+rockyRel+"/modules.dep"))))
	if err != nil || xz["ip_vs_rr"].Path != "kernel/net/netfilter/ipvs/ip_vs_rr.ko.xz" {
		t.Errorf("rocky8 ip_vs_rr = %+v, %v", xz["ip_vs_rr"], err)
	}
	for _, bad := range []struct{ name, in, want string }{
		{"truncated before colon", "kernel/lib/libcrc32c.ko:\nkernel/net/netfilter/ipvs/ip_v", "line 2: no ':'"},
		{"not a module", "kernel/lib/libcrc32c.txt:\n", "line 1: \"kernel/lib/libcrc32c.txt\" is not a module file"},
		{"bad dep", "kernel/a.ko: kernel/b\n", "dependency \"kernel/b\" of a"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			_, err := ParseModulesDep(strings.NewReader(bad.in))
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("err = %v, want %q", err, bad.want)
			}
		})
	}
}

func TestParseModulesBuiltin(t *testing.T) {
	b, err := ParseModulesBuiltin(strings.NewReader(string(readTestdata(t, "debian12/lib/modules/"+debRel+"/modules.builtin"))))
	if err != nil {
		t.Fatal(err)
	}
	if !b["ipv6"] || !b["crc32"] || !b["crc_ccitt"] || b["ip_vs"] {
		t.Errorf("builtin set wrong: %v", b)
	}
	if _, err := ParseModulesBuiltin(strings.NewReader("kernel/lib/\n")); err == nil {
		t.Error("want an error for a path that is no module")
	}
}

func TestParseModulesSoftdep(t *testing.T) {
	s, err := ParseModulesSoftdep(strings.NewReader(string(readTestdata(t, "debian12/lib/modules/"+debRel+"/modules.softdep"))))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Softdep{Pre: []string{"crc32c"}}, s["libcrc32c"]); diff != "" {
		t.Errorf("libcrc32c (-want +got):\n%s", diff)
	}
	// Debian 6.1's "softdep cifs gcm" (no pre:/post:) is ignored, as kmod ignores it.
	if len(s["cifs"].Pre)+len(s["cifs"].Post) != 0 {
		t.Errorf("cifs softdeps = %+v, want none", s["cifs"])
	}
	got, err := ParseModulesSoftdep(strings.NewReader("softdep a pre: b c post: d\\\n e\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Softdep{Pre: []string{"b", "c"}, Post: []string{"d", "e"}}, got["a"]); diff != "" {
		t.Errorf("continued line (-want +got):\n%s", diff)
	}
	if _, err := ParseModulesSoftdep(strings.NewReader("alias x y\n")); err == nil {
		t.Error("want an error for an alias in modules.softdep")
	}
	if _, err := ParseModulesSoftdep(strings.NewReader("softdep\n")); err == nil {
		t.Error("want an error for softdep without a module")
	}
}

func TestAliases(t *testing.T) {
	a, err := ParseModulesAlias(strings.NewReader(string(readTestdata(t, "debian12/lib/modules/"+debRel+"/modules.alias"))))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want []string
	}{
		{"crc32c", []string{"crc32c_intel", "crc32c_generic"}},
		{"crypto-crc32c", []string{"crc32c_intel", "crc32c_generic"}},
		{"net-pf-16-proto-16-family-IPVS", []string{"ip_vs"}},
		{"cpu:type:x86,ven0000fam0006mod003F:feature:,0094,00AB", []string{"crc32c_intel"}},
		{"ip_conntrack", []string{"nf_conntrack"}},
		{"nosuch", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, resolveAlias(a, tc.name)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFnmatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"crc32c", "crc32c", true},
		{"crc32c", "crc32", false},
		{"pci:v00008086d*sv*sd*bc*sc*i*", "pci:v00008086d000010D3sv00008086sd0000A01Fbc02sc00i00", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a?c", "abc", true},
		{"[a-c]x", "bx", true},
		{"[!a-c]x", "bx", false},
		{"[^a-c]x", "dx", true},
		{"[]]", "]", true},
		{"[abc", "[abc", true},
		{"*", "", true},
		{"a*/b", "a/x/b", true},
	}
	for _, tc := range tests {
		if got := fnmatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("fnmatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestParseModulesLoad(t *testing.T) {
	in := "# comment\r\n; also a comment\r\n\r\n  ip_vs  \r\nip-vs-rr\r\nnf_conntrack_ipv4\r\n"
	got, err := ParseModulesLoad(strings.NewReader(in), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []Declaration{{Module: "ip_vs", Line: 4}, {Module: "ip_vs_rr", Line: 5}, {Module: "nf_conntrack_ipv4", Line: 6}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	etc, err := ParseModulesLoad(strings.NewReader("# /etc/modules\nloop max_loop=64\n;x\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Declaration{{Module: "loop", Line: 2}, {Module: ";x", Line: 3}}, etc); diff != "" {
		t.Errorf("/etc/modules (-want +got):\n%s", diff)
	}
}

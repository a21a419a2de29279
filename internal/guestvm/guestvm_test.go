// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseManifest(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []Entry
		wantErr string
	}{
		{
			name: "every kind, comments and blanks",
			text: "# head\n\nmodule dummy\nmodule-dir kernel/net/netfilter/ipvs  # all schedulers\n" +
				"pkg kmod\nbin /usr/bin/kmod /usr/libexec/kmod/kmod\nbin /usr/sbin/ipvsadm\n" +
				"file /etc/protocols\nlink kmod /usr/libexec/kmod/modprobe\n",
			want: []Entry{
				{Kind: "module", Arg: "dummy", Source: "m:3"},
				{Kind: "module-dir", Arg: "kernel/net/netfilter/ipvs", Source: "m:4"},
				{Kind: "pkg", Arg: "kmod", Source: "m:5"},
				{Kind: "bin", Arg: "/usr/bin/kmod", Dest: "/usr/libexec/kmod/kmod", Source: "m:6"},
				{Kind: "bin", Arg: "/usr/sbin/ipvsadm", Source: "m:7"},
				{Kind: "file", Arg: "/etc/protocols", Source: "m:8"},
				{Kind: "link", Arg: "kmod", Dest: "/usr/libexec/kmod/modprobe", Source: "m:9"},
			},
		},
		{name: "unknown kind", text: "module dummy\nbinary /bin/sh\n", wantErr: `m:2: unknown line kind "binary"`},
		{name: "link without guest path", text: "link kmod\n", wantErr: "m:1: link takes"},
		{name: "module with two names", text: "module a b\n", wantErr: "m:1: module takes one argument"},
		{name: "bin with too much", text: "bin /a /b /c\n", wantErr: "m:1: bin takes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseManifest("m", tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, m.Entries); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestShippedManifests parses the repository's manifests: a typo there
// fails here, not after a kernel download.
func TestShippedManifests(t *testing.T) {
	ms, err := Manifests("../..", []string{"hack/e2e/guest.manifest"}, []string{"nf_tables"}, []string{"/usr/sbin/ipset"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("got %d manifests, want base, e2e and the extra one", len(ms))
	}
	pkgs := Packages(ms)
	for _, want := range []string{"ipvsadm", "kmod", "systemd", "iptables", "ipset"} {
		if !slices.Contains(pkgs, want) {
			t.Errorf("packages %v lack %s", pkgs, want)
		}
	}
	if n := len(pkgs); n != len(slices.Compact(slices.Clone(pkgs))) {
		t.Errorf("packages repeat: %v", pkgs)
	}
	extra := ms[2].Entries
	if len(extra) != 2 || extra[0] != (Entry{Kind: "module", Arg: "nf_tables", Source: "extra:1"}) ||
		extra[1] != (Entry{Kind: "bin", Arg: "/usr/sbin/ipset", Source: "extra:2"}) {
		t.Errorf("extra manifest: %+v", extra)
	}
}

func TestExitCode(t *testing.T) {
	const nonce = "0123456789abcdef"
	tests := []struct {
		name    string
		console string
		want    int
		ok      bool
	}{
		{"passed", "boot\nipvs-guard-guest-exit " + nonce + " 0\r\n", 0, true},
		{"failed", "ipvs-guard-guest-exit " + nonce + " 1\n[    3.1] reboot: Power down\n", 1, true},
		{"last marker wins", "ipvs-guard-guest-exit " + nonce + " 0\nipvs-guard-guest-exit " + nonce + " 125\n", 125, true},
		{"another run's nonce", "ipvs-guard-guest-exit ffffffffffffffff 0\n", 0, false},
		{"a test printing the marker mid-line", "got: ipvs-guard-guest-exit " + nonce + " 0\n", 0, false},
		{"no marker (panic)", "Kernel panic - not syncing: Attempted to kill init!\n", 0, false},
		{"garbage code", "ipvs-guard-guest-exit " + nonce + " x\n", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ExitCode(tt.console, nonce)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ExitCode = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestCopyConsole(t *testing.T) {
	in := "[    0.512345] Run /init as init process\r\nhello\r\nipvs-guard-guest-exit abc 0\r\n[ 1.0] x\npartial"
	tests := []struct {
		filter bool
		want   string
	}{
		{false, "[    0.512345] Run /init as init process\nhello\nipvs-guard-guest-exit abc 0\n[ 1.0] x\npartial"},
		{true, "hello\npartial"},
	}
	for _, tt := range tests {
		var file, out strings.Builder
		if err := copyConsole(strings.NewReader(in), &file, &out, tt.filter); err != nil {
			t.Fatal(err)
		}
		if want := strings.ReplaceAll(in, "\r", ""); file.String() != want {
			t.Errorf("filter=%v: console file %q, want %q", tt.filter, file.String(), want)
		}
		if out.String() != tt.want {
			t.Errorf("filter=%v: output %q, want %q", tt.filter, out.String(), tt.want)
		}
	}
}

func TestMachineArgs(t *testing.T) {
	t.Setenv("GUEST_ACCEL", "tcg")
	tests := []struct {
		name string
		m    Machine
		want string
	}{
		{
			name: "guest",
			m:    Machine{Kernel: "vmlinux", Initrd: "initrd", Append: " console=ttyS0 ", NoReboot: true},
			want: "-accel tcg -cpu max -m 1G -smp 1 -nodefaults -no-user-config -display none -serial stdio -no-reboot -kernel vmlinux -initrd initrd -append console=ttyS0",
		},
		{
			name: "network with forwarded ports",
			m:    Machine{Kernel: "k", Memory: "1536M", Net: true, HostFwd: "hostfwd=tcp:127.0.0.1:1-:8000"},
			want: "-accel tcg -cpu max -m 1536M -smp 1 -nodefaults -no-user-config -display none -serial stdio -netdev user,id=n0,hostfwd=tcp:127.0.0.1:1-:8000 -device virtio-net-pci,netdev=n0,romfile= -kernel k -append ",
		},
		{
			name: "user network and a NIC on a host tap",
			m:    Machine{Kernel: "k", Net: true, Taps: []TapNIC{{Ifname: "l2ab-tap", MAC: "52:54:00:12:34:56"}}},
			want: "-accel tcg -cpu max -m 1G -smp 1 -nodefaults -no-user-config -display none -serial stdio -netdev user,id=n0 -device virtio-net-pci,netdev=n0,romfile= -netdev tap,id=tap0,ifname=l2ab-tap,script=no,downscript=no -device virtio-net-pci,netdev=tap0,mac=52:54:00:12:34:56,romfile= -kernel k -append ",
		},
		{
			name: "two vCPUs",
			m:    Machine{Kernel: "k", CPUs: 2},
			want: "-accel tcg -cpu max -m 1G -smp 2 -nodefaults -no-user-config -display none -serial stdio -kernel k -append ",
		},
		{
			name: "node with a disk",
			m:    Machine{Kernel: "k", Initrd: "i", Drives: []string{"file=d.img,if=virtio,format=raw"}, Append: "root=/dev/vda"},
			want: "-accel tcg -cpu max -m 1G -smp 1 -nodefaults -no-user-config -display none -serial stdio -drive file=d.img,if=virtio,format=raw -kernel k -initrd i -append root=/dev/vda",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(tt.m.Args(), " "); got != tt.want {
				t.Errorf("args\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestTestArgs(t *testing.T) {
	tests := []struct {
		name string
		o    TestsOptions
		want []string
	}{
		{"tests", TestsOptions{}, []string{"-test.v", "-test.count=1", "-test.run=^(TestA|TestB)$", "-test.timeout=5m"}},
		{"tests, run and timeout set", TestsOptions{Run: "TestA.*", Timeout: "9m"},
			[]string{"-test.v", "-test.count=1", "-test.run=TestA.*", "-test.timeout=9m"}},
		{"benchmarks", TestsOptions{Bench: true},
			[]string{"-test.v", "-test.count=1", "-test.run=^$", "-test.bench=^(TestA|TestB)$", "-test.benchtime=10x", "-test.benchmem"}},
		{"one benchmark", TestsOptions{Bench: true, BenchRE: "BenchmarkX", BenchTime: "5x"},
			[]string{"-test.v", "-test.count=1", "-test.run=^$", "-test.bench=^(BenchmarkX)$", "-test.benchtime=5x", "-test.benchmem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, testArgs(tt.o, "TestA|TestB")); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGuestFuncs(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a_guest_test.go": "//go:build guest\n\npackage a\n\nfunc TestGuestA(t *testing.T) {}\nfunc BenchmarkGuestA(b *testing.B) {}\nfunc helper(t *testing.T) {}\n",
		"b_guest_test.go": "//go:build linux && guest\n\npackage a\n\nfunc TestGuestB(tt *testing.T) {}\n",
		"unit_test.go":    "package a\n\nfunc TestUnit(t *testing.T) {}\n",
		"e2e_test.go":     "//go:build e2e\n\npackage a\n\nfunc TestE2E(t *testing.T) {}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for prefix, want := range map[string][]string{"Test": {"TestGuestA", "TestGuestB"}, "Benchmark": {"BenchmarkGuestA"}} {
		got, err := GuestFuncs(dir, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s functions (-want +got):\n%s", prefix, diff)
		}
	}
}

func TestKernelVersionParsing(t *testing.T) {
	if got := firstValue("# comment\n\n  6.1.0-56-amd64  # pinned\n7.0\n"); got != "6.1.0-56-amd64" {
		t.Errorf("firstValue = %q", got)
	}
	out := "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n  Depends: other\n"
	if got := dependsKernel(out); got != "6.1.0-57-amd64" {
		t.Errorf("dependsKernel = %q", got)
	}
	if got := dependsKernel("linux-image-amd64\n"); got != "" {
		t.Errorf("dependsKernel of nothing = %q", got)
	}
}

func TestPayloadEnv(t *testing.T) {
	p, err := NewPayload(filepath.Join(t.TempDir(), "payload"), "/dev/null", "/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteEnv([]string{"CI=true", "X=it's"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(p.Dir, "guest", "env"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "export CI='true'\nexport X='it'\\''s'\n"; string(raw) != want {
		t.Errorf("env %q, want %q", raw, want)
	}
	for _, f := range []string{"init", "guest/main"} {
		if fi, err := os.Stat(filepath.Join(p.Dir, f)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v", f, fi, err)
		}
	}
}

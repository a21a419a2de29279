// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
)

// TestShippedKernelPins reads the repository's kernel pins: each names a
// kernel, and the default release is among them.
func TestShippedKernelPins(t *testing.T) {
	names, err := Releases("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bullseye", "bookworm", "trixie"} {
		if !slices.Contains(names, want) {
			t.Errorf("releases %v lack %s", names, want)
		}
	}
	if !slices.Contains(names, DefaultRelease) {
		t.Errorf("releases %v lack the default %s", names, DefaultRelease)
	}
	for _, n := range names {
		r, err := LoadRelease("../..", t.TempDir(), n)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(r.Pin)
		if err != nil {
			t.Fatal(err)
		}
		if v := firstValue(string(raw)); !strings.HasSuffix(v, "-amd64") {
			t.Errorf("%s pins %q, want a linux-image-<version>-amd64 version", r.Pin, v)
		}
		if r.Host != (n == HostCodename()) || r.Host != (r.Apt.Dir == "") {
			t.Errorf("%s: host %v, apt dir %q (host codename %q)", n, r.Host, r.Apt.Dir, HostCodename())
		}
	}
	if _, err := LoadRelease("../..", t.TempDir(), "sid"); err == nil || !strings.Contains(err.Error(), "no kernel pinned") {
		t.Errorf("an unpinned release: error %v", err)
	}
	if _, err := LoadRelease("../..", t.TempDir(), "../etc"); err == nil || !strings.Contains(err.Error(), "not a Debian codename") {
		t.Errorf("a path as release: error %v", err)
	}
}

func TestDepNames(t *testing.T) {
	tests := []struct{ field, want string }{
		{"libc6 (>= 2.38), libsystemd-shared (= 257.13-1~deb13u1)", "libc6 libsystemd-shared"},
		{"libcrypt1 (>= 1:4.4.0) | libcrypt-dev, python3:any, , libfoo:amd64 (>= 1)", "libcrypt1 python3 libfoo"},
		{"", ""},
		{", ", ""},
	}
	for _, tt := range tests {
		if got := strings.Join(depNames(tt.field), " "); got != tt.want {
			t.Errorf("depNames(%q) = %q, want %q", tt.field, got, tt.want)
		}
	}
}

func TestParseStanzas(t *testing.T) {
	out := "Package: kmod\nVersion: 34.2-2\nDepends: libc6 (>= 2.38),\n libkmod2 (= 34.2-2)\nDescription: tools\n more\n\n" +
		"Package: libkmod2\nVersion: 34.2-2\n\n\n"
	got := parseStanzas(out)
	want := []map[string]string{
		{"Package": "kmod", "Version": "34.2-2", "Depends": "libc6 (>= 2.38),\n libkmod2 (= 34.2-2)", "Description": "tools\n more"},
		{"Package": "libkmod2", "Version": "34.2-2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stanzas (-want +got):\n%s", diff)
	}
	if names := depNames(got[0]["Depends"]); !slices.Equal(names, []string{"libc6", "libkmod2"}) {
		t.Errorf("continued Depends: %v", names)
	}
}

func TestSourceURIs(t *testing.T) {
	dir := t.TempDir()
	deb822 := filepath.Join(dir, "debian.sources")
	os.WriteFile(deb822, []byte("Types: deb\n# http://snapshot.debian.org/x\nURIs: http://mirror.example/debian/\nSuites: bookworm\n\n"+
		"Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"), 0o644)
	oneLine := filepath.Join(dir, "sources.list")
	os.WriteFile(oneLine, []byte("# deb http://commented.example/debian sid main\ndeb [signed-by=/k.gpg arch=amd64] https://m.example/debian bookworm main\n"), 0o644)
	if got, want := sourceURIs(deb822), []string{"http://mirror.example/debian/", "http://mirror.example/debian-security"}; !slices.Equal(got, want) {
		t.Errorf("deb822: %v, want %v", got, want)
	}
	if got, want := sourceURIs(oneLine), []string{"https://m.example/debian"}; !slices.Equal(got, want) {
		t.Errorf("one-line: %v, want %v", got, want)
	}
}

// TestResolveIn: links inside an unpacked package tree resolve inside it,
// absolute ones too (dpkg -x keeps /lib64/ld-linux-x86-64.so.2 →
// /lib/x86_64-linux-gnu/…), and through linked directories (lib → usr/lib).
func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/lib/x86_64-linux-gnu"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "lib64"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/ld-2.31.so"), []byte("ld"), 0o755))
	must(os.Symlink("ld-2.31.so", filepath.Join(root, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")))
	must(os.Symlink("usr/lib", filepath.Join(root, "lib")))
	must(os.Symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", filepath.Join(root, "lib64/ld-linux-x86-64.so.2")))
	must(os.Symlink("/etc/passwd", filepath.Join(root, "usr/lib/escape")))
	want := filepath.Join(root, "usr/lib/x86_64-linux-gnu/ld-2.31.so")
	for _, p := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/ld-2.31.so"} {
		got, err := resolveIn(root, p)
		if err != nil || got != want {
			t.Errorf("resolveIn(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
	if got, err := resolveIn(root, "/usr/lib/escape"); err == nil {
		t.Errorf("a link to the host's /etc/passwd resolved to %s", got)
	}
	if _, err := resolveIn(root, "/usr/lib/x86_64-linux-gnu"); err == nil {
		t.Error("a directory resolved as a file")
	}
}

// TestMergeUsr: Debian 13's kernel package ships usr/lib/modules; the
// unpacked tree gets the lib → usr/lib link; older packages are left alone.
func TestMergeUsr(t *testing.T) {
	for _, tc := range []struct {
		name, modules string
		wantLink      bool
	}{
		{"merged-/usr package", "usr/lib/modules/6.12.1-amd64", true},
		{"/lib package", "lib/modules/6.12.1-amd64", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, tc.modules, "kernel"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := mergeUsr(root, "6.12.1-amd64"); err != nil {
				t.Fatal(err)
			}
			if !exists(filepath.Join(root, "lib/modules/6.12.1-amd64/kernel")) {
				t.Error("lib/modules/6.12.1-amd64 not reachable")
			}
			fi, err := os.Lstat(filepath.Join(root, "lib"))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode()&os.ModeSymlink != 0; got != tc.wantLink {
				t.Errorf("lib is a link: %v, want %v", got, tc.wantLink)
			}
		})
	}
}

// TestExtractVmlinux: the ELF comes out of an xz bzImage (Debian 11, 12)
// and a zstd one (Debian 13), with the bzImage's bytes around the stream.
func TestExtractVmlinux(t *testing.T) {
	elfImage := append([]byte("\x7fELF"), bytes.Repeat([]byte("kernel "), 1000)...)
	xzStream := func(t *testing.T) []byte {
		cmd := exec.Command("xz", "-c", "--check=crc32")
		cmd.Stdin = bytes.NewReader(elfImage)
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("xz: %v", err)
		}
		return out
	}
	zstdFrame := func(t *testing.T) []byte {
		e, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		return e.EncodeAll(elfImage, nil)
	}
	for _, tc := range []struct {
		name, config string
		stream       func(*testing.T) []byte
		wantErr      string
	}{
		{"xz", "CONFIG_PVH=y\nCONFIG_KERNEL_XZ=y\n", xzStream, ""},
		{"zstd", "CONFIG_PVH=y\nCONFIG_KERNEL_ZSTD=y\n", zstdFrame, ""},
		{"no PVH", "CONFIG_KERNEL_ZSTD=y\n", zstdFrame, "CONFIG_PVH"},
		{"zstd config, xz image", "CONFIG_PVH=y\nCONFIG_KERNEL_ZSTD=y\n", xzStream, "no zstd frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kdir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(kdir, "root/boot"), 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(kdir, "root/boot/config-6.12.1-amd64"), []byte(tc.config), 0o644)
			bz := append(append([]byte("MZ setup code HdrS "), tc.stream(t)...), []byte("trailing setup data")...)
			os.WriteFile(filepath.Join(kdir, "vmlinuz"), bz, 0o644)
			err := extractVmlinux(kdir, kdir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(kdir, "vmlinux"))
			if err != nil || !bytes.Equal(got, elfImage) {
				t.Errorf("vmlinux: %d bytes (%v), want the %d-byte ELF", len(got), err, len(elfImage))
			}
		})
	}
}

// TestParseDlopenNotes reads .note.dlopen sections as systemd ≥ 256 and
// kmod ≥ 34 write them (owner "FDO", a JSON array), and survives bad ones.
func TestParseDlopenNotes(t *testing.T) {
	note := func(desc string) []byte {
		var b bytes.Buffer
		d := append([]byte(desc), 0)
		binary.Write(&b, binary.LittleEndian, []uint32{4, uint32(len(d)), 0x407c0c0a})
		b.WriteString("FDO\x00")
		b.Write(d)
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
		return b.Bytes()
	}
	two := append(note(`[{"feature":"kmod","soname":["libkmod.so.2"],"priority":"recommended"}]`),
		note(`[{"soname":["liblzma.so.5","liblzma.so.6"]}]`)...)
	tests := []struct {
		name string
		data []byte
		want []string
	}{
		{"two notes", two, []string{"libkmod.so.2", "liblzma.so.5", "liblzma.so.6"}},
		{"not JSON", note("not json"), nil},
		{"truncated", two[:20], nil},
		{"descsz past the end", []byte{4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 'F', 'D', 'O', 0}, nil},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		if got := parseDlopenNotes(tt.data); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestStageUserland builds a userland root from the host's own kmod and
// systemd-modules-load with their libraries, stages it as the guest would
// get it, and runs the staged programs through the staged loader: kmod's
// multi-call dispatch on argv[0] and systemd-modules-load's libraries
// must work with nothing but /opt/debian-<suite>/.
func TestStageUserland(t *testing.T) {
	u := &Userland{Suite: "test", Dir: t.TempDir(), Packages: []string{"kmod 1", "systemd 2"}}
	root := u.Root()
	var progs []string
	for _, p := range []string{"/usr/bin/kmod", "/usr/lib/systemd/systemd-modules-load"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("host has no %s", p)
		}
		progs = append(progs, p)
	}
	for _, p := range progs {
		files := append([]string{p}, lddLibraries(t.Context(), p)...)
		for _, f := range files {
			if err := copyFile(f, filepath.Join(root, guestPath(f))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// dpkg -x keeps the loader's absolute link.
	if err := os.MkdirAll(filepath.Join(root, "lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(root, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")) {
		if err := copyFile("/lib64/ld-linux-x86-64.so.2", filepath.Join(root, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")); err != nil {
			t.Fatal(err)
		}
	}
	stage := t.TempDir()
	if err := u.stageUserland(stage); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(stage, userlandPrefix("test"))
	for _, w := range []string{"usr/lib/systemd/systemd-modules-load", "usr/libexec/kmod/modprobe", "usr/libexec/kmod/kmod"} {
		raw, err := os.ReadFile(filepath.Join(stage, w))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), "exec /opt/debian-test/ld.so --library-path /opt/debian-test/lib /opt/debian-test/bin/"+filepath.Base(w)+` "$@"`) {
			t.Errorf("wrapper %s:\n%s", w, raw)
		}
	}
	for _, soname := range []string{"libkmod.so.2", "libc.so.6"} {
		if !exists(filepath.Join(prefix, "lib", soname)) {
			t.Errorf("staged libraries lack %s", soname)
		}
	}
	for _, tc := range []struct {
		prog string
		args []string
		want string
	}{
		{"modprobe", []string{"--version"}, "kmod version"},
		{"insmod", nil, "insmod: ERROR: missing filename"}, // argv[0] dispatch, not kmod's "missing command"
		{"lsmod", nil, "Module"},
		{"systemd-modules-load", []string{"--version"}, "systemd"},
	} {
		cmd := exec.Command(filepath.Join(prefix, "ld.so"), append([]string{"--library-path", filepath.Join(prefix, "lib"),
			filepath.Join(prefix, "bin", tc.prog)}, tc.args...)...)
		cmd.Env = []string{"LD_LIBRARY_PATH="}
		out, err := cmd.CombinedOutput()
		if tc.prog == "lsmod" && err != nil && strings.Contains(string(out), "/proc/modules") {
			continue // no module support on this host: kmod still ran as lsmod
		}
		if tc.prog == "insmod" {
			err = nil // it exits 1 without a file
		}
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %v: %v\n%s", tc.prog, tc.args, err, out)
		}
	}
}

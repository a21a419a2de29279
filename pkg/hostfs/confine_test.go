// SPDX-License-Identifier: Apache-2.0

package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tree builds a root and a sibling "outside" directory holding a secret.
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/etc", root + "/inside", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(outside, "secret"), "outside\n")
	mustWrite(t, filepath.Join(root, "inside/secret"), "inside\n")
	return root, outside
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustLink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

var testLimit = Limit{Kind: "a test file", Max: 1 << 10}

func TestReadFileResolvesInsideRoot(t *testing.T) {
	root, outside := tree(t)
	mustLink(t, filepath.Join(outside, "secret"), root+"/etc/abs-host") // absolute host path: does not exist inside
	mustLink(t, "/inside/secret", root+"/etc/abs")
	mustLink(t, "../../../../../../inside/secret", root+"/etc/dotdot")
	mustLink(t, "../../outside/secret", root+"/etc/escape")
	mustLink(t, outside, root+"/linkdir")
	tests := []struct {
		path    string
		want    string
		wantErr error
	}{
		{"/etc/abs", "inside\n", nil},
		{"/etc/dotdot", "inside\n", nil},
		{"/etc/escape", "", fs.ErrNotExist},
		{"/etc/abs-host", "", fs.ErrNotExist},
		{"/linkdir/secret", "", fs.ErrNotExist},
		{"/../outside/secret", "", fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			b, err := New(root).ReadFile(tt.path, testLimit)
			if !errors.Is(err, tt.wantErr) || string(b) != tt.want {
				t.Errorf("ReadFile(%s) = %q, %v; want %q, %v", tt.path, b, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestReadFileRefusesSpecialFilesWithoutBlocking(t *testing.T) {
	root, _ := tree(t)
	if err := syscall.Mkfifo(root+"/etc/fifo.conf", 0o644); err != nil {
		t.Fatal(err)
	}
	mustLink(t, "/etc/fifo.conf", root+"/etc/fifo-link.conf")
	r := New(root)
	for _, p := range []string{"/etc/fifo.conf", "/etc/fifo-link.conf"} {
		done := make(chan error, 1)
		go func() { _, err := r.ReadFile(p, testLimit); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
				t.Errorf("ReadFile(%s) error = %v, want ErrNotRegular naming a named pipe", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadFile(%s) blocked on a FIFO", p)
		}
	}
	if _, err := New("/").ReadFile("/dev/zero", testLimit); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile(/dev/zero) error = %v, want ErrNotRegular", err)
	}
	fi, err := New("/").Stat("/dev/null")
	if err != nil || !IsDevNull(fi) {
		t.Errorf("IsDevNull(/dev/null) = false (%v)", err)
	}
}

func TestReadFileLimit(t *testing.T) {
	root, _ := tree(t)
	mustWrite(t, root+"/big", strings.Repeat("x", 1025))
	mustWrite(t, root+"/fits", strings.Repeat("x", 1024))
	r := New(root)
	if _, err := r.ReadFile("/big", testLimit); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1 KiB limit for a test file") {
		t.Errorf("ReadFile(big) error = %v, want ErrTooLarge naming the limit", err)
	}
	if b, err := r.ReadFile("/fits", testLimit); err != nil || len(b) != 1024 {
		t.Errorf("ReadFile(fits) = %d bytes, %v", len(b), err)
	}
	// A proc file says size 0: the limit is enforced while reading.
	if _, err := New("/").ReadFile("/proc/self/maps", Limit{Kind: "maps", Max: 16}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile(/proc/self/maps) error = %v, want ErrTooLarge", err)
	}
}

func TestWriteFileAtomicStaysInsideRoot(t *testing.T) {
	root, outside := tree(t)
	if err := os.RemoveAll(root + "/etc"); err != nil {
		t.Fatal(err)
	}
	mustLink(t, outside, root+"/etc") // <root>/etc -> /…/outside (absolute)
	r := New(root)
	err := r.WriteFileAtomic("/etc/modules-load.d/ipvs.conf", []byte("ip_vs\n"), 0o644)
	if _, serr := os.Stat(filepath.Join(outside, "modules-load.d")); serr == nil {
		t.Fatalf("a write under a link to %s landed outside the root", outside)
	}
	if err == nil {
		// The link resolved inside the root: the file is there.
		if b, rerr := r.ReadFile("/etc/modules-load.d/ipvs.conf", testLimit); rerr != nil || string(b) != "ip_vs\n" {
			t.Errorf("reading back = %q, %v", b, rerr)
		}
	}
	// A final link is replaced, never written through.
	mustLink(t, filepath.Join(outside, "secret"), root+"/inside/victim")
	if err := r.WriteFileAtomic("/inside/victim", []byte("x"), 0o644); !errors.Is(err, ErrNotRegular) {
		t.Errorf("writing over a link: %v, want ErrNotRegular", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "outside\n" {
		t.Errorf("the link's target changed: %q", b)
	}
	// A relative link inside the root is followed, inside the root.
	mustLink(t, "inside", root+"/rel")
	if err := r.WriteFileAtomic("/rel/new.conf", []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(root + "/inside/new.conf")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("new file: %v, %v", fi, err)
	}
	ents, _ := os.ReadDir(root + "/inside")
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

func TestLstatReadlinkReadDir(t *testing.T) {
	root, _ := tree(t)
	mustLink(t, "/dev/null", root+"/etc/masked.conf")
	r := New(root)
	fi, err := r.Lstat("/etc/masked.conf")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("Lstat = %v, %v; want a link", fi, err)
	}
	if got, err := r.Readlink("/etc/masked.conf"); err != nil || got != "/dev/null" {
		t.Errorf("Readlink = %q, %v", got, err)
	}
	ents, err := r.ReadDir("/etc")
	if err != nil || len(ents) != 1 || ents[0].Name() != "masked.conf" {
		t.Errorf("ReadDir = %v, %v", ents, err)
	}
}

func TestRemoveIfSame(t *testing.T) {
	root, outside := tree(t)
	r := New(root)
	mustWrite(t, root+"/etc/own.conf", "own\n")
	_, read, err := r.ReadFileStat("/etc/own.conf", testLimit)
	if err != nil {
		t.Fatal(err)
	}
	// Replaced since it was read: kept.
	mustWrite(t, root+"/etc/new.conf", "someone's\n")
	if err := os.Rename(root+"/etc/new.conf", root+"/etc/own.conf"); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveIfSame("/etc/own.conf", read); !errors.Is(err, ErrChanged) {
		t.Errorf("replaced file: %v, want ErrChanged", err)
	}
	// The name a link to the file read: neither the link nor the file goes.
	_, read, err = r.ReadFileStat("/inside/secret", testLimit)
	if err != nil {
		t.Fatal(err)
	}
	mustLink(t, "/inside/secret", root+"/etc/link.conf")
	if err := r.RemoveIfSame("/etc/link.conf", read); !errors.Is(err, ErrChanged) {
		t.Errorf("link: %v, want ErrChanged", err)
	}
	// The directory an absolute link out of the root: resolved inside it,
	// so the host's file of that name stays.
	mustWrite(t, root+outside+"/secret", "inside, at the host's path\n")
	mustLink(t, outside, root+"/etc/d")
	_, read, err = r.ReadFileStat("/etc/d/secret", testLimit)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveIfSame("/etc/d/secret", read); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root + outside + "/secret"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the file inside the root is still there: %v", err)
	}
	if b, err := os.ReadFile(outside + "/secret"); err != nil || string(b) != "outside\n" {
		t.Errorf("the host's file was touched: %q, %v", b, err)
	}
	if err := r.RemoveIfSame("/etc/d/secret", read); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed twice: %v, want ErrNotExist", err)
	}
}

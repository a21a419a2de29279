// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Userland is a Debian release's own systemd-modules-load and kmod with
// every library they load, unpacked from that release's packages (dpkg -x,
// no maintainer scripts): the judges a guest booting that release's kernel
// runs instead of the host's. Cached under
// $IPVS_GUARD_CACHE/guest/userland/<suite>-<key>/, key = the packages'
// versions.
type Userland struct {
	// Suite is the release's codename.
	Suite string
	// Dir holds root/ (the unpacked packages) and packages (one
	// "name version" line each).
	Dir string
	// Key hashes the suite and the packages' versions.
	Key string
	// Packages are the unpacked packages as "name version", sorted.
	Packages []string
}

// userlandSeeds are the packages a userland starts from; their Depends and
// Pre-Depends on libraries follow (userlandFollows). liblzma5, libzstd1 and
// zlib1g are what libkmod reads compressed modules with (kmod ≥ 32 loads
// them with dlopen, so no Depends names them).
var userlandSeeds = []string{"systemd", "kmod", "libkmod2", "liblzma5", "libzstd1", "zlib1g"}

// userlandFollows reports whether a dependency belongs in the userland:
// shared libraries (and the seeds), not tools or data.
func userlandFollows(pkg string) bool {
	return strings.HasPrefix(pkg, "lib") || slices.Contains(userlandSeeds, pkg)
}

// dlopenSonames are libraries the judges may dlopen without an ELF
// .note.dlopen naming them; each is copied into the guest when the userland
// has it.
var dlopenSonames = []string{"libkmod.so.2", "liblzma.so.5", "libzstd.so.1", "libz.so.1"}

// Root is the unpacked packages' tree.
func (u *Userland) Root() string { return filepath.Join(u.Dir, "root") }

// Version returns the unpacked version of package pkg, or "".
func (u *Userland) Version(pkg string) string {
	for _, p := range u.Packages {
		if n, v, _ := strings.Cut(p, " "); n == pkg {
			return v
		}
	}
	return ""
}

// EnsureUserland returns the cached userland of apt's suite, unpacking it
// once (under flock). A cached one is used without asking apt; after the
// suite's package lists were refreshed (Apt.Update) and the versions moved,
// the next call unpacks the new set under a new key.
func EnsureUserland(ctx context.Context, cacheDir string, a *Apt, logw io.Writer) (*Userland, error) {
	base := filepath.Join(cacheDir, "guest", "userland")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	current := filepath.Join(base, a.Suite+".current")
	if u, err := readUserland(base, a.Suite, current); err == nil {
		return u, nil
	}
	unlock, err := lockFile(filepath.Join(base, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if u, err := readUserland(base, a.Suite, current); err == nil {
		return u, nil
	}
	if err := a.Update(ctx, false, logw); err != nil {
		return nil, err
	}
	pkgs, err := resolvePackages(ctx, a, userlandSeeds)
	if err != nil {
		return nil, fmt.Errorf("resolving %s's systemd and kmod: %w", a.Suite, err)
	}
	u := &Userland{Suite: a.Suite, Packages: pkgs, Key: userlandKey(a.Suite, pkgs)}
	u.Dir = filepath.Join(base, a.Suite+"-"+u.Key)
	if !exists(filepath.Join(u.Dir, ".ready")) {
		if err := unpackUserland(ctx, a, u, logw); err != nil {
			return nil, err
		}
	}
	return u, writeFileAtomic(current, []byte(filepath.Base(u.Dir)+"\n"))
}

// readUserland reads the userland current names.
func readUserland(base, suite, current string) (*Userland, error) {
	name, err := os.ReadFile(current)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, strings.TrimSpace(string(name)))
	if !exists(filepath.Join(dir, ".ready")) {
		return nil, fmt.Errorf("userland %s is not complete", dir)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "packages"))
	if err != nil {
		return nil, err
	}
	pkgs := strings.Split(strings.TrimSpace(string(raw)), "\n")
	return &Userland{Suite: suite, Dir: dir, Packages: pkgs, Key: userlandKey(suite, pkgs)}, nil
}

func userlandKey(suite string, pkgs []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", suite, strings.Join(pkgs, "\n"))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// unpackUserland downloads u's packages and dpkg -x's them into u.Root().
func unpackUserland(ctx context.Context, a *Apt, u *Userland, logw io.Writer) error {
	tmp, err := os.MkdirTemp(filepath.Dir(u.Dir), "."+filepath.Base(u.Dir)+".")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// apt-get drops to the _apt user for downloads: it must reach debs/.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	debs := filepath.Join(tmp, "debs")
	if err := os.Mkdir(debs, 0o777); err != nil {
		return err
	}
	// apt-get drops to the _apt user for downloads.
	if err := os.Chmod(debs, 0o777); err != nil {
		return err
	}
	logf(logw, "downloading Debian %s's systemd, kmod and their libraries (%d packages)", u.Suite, len(u.Packages))
	args := []string{"download", "-q"}
	for _, p := range u.Packages {
		n, v, _ := strings.Cut(p, " ")
		args = append(args, n+"="+v)
	}
	cmd := a.Command(ctx, "apt-get", args...)
	cmd.Dir = debs
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get download for %s: %w", u.Suite, err)
	}
	files, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	if len(files) != len(u.Packages) {
		return fmt.Errorf("apt-get download for %s left %d packages, want %d", u.Suite, len(files), len(u.Packages))
	}
	root := filepath.Join(tmp, "root")
	for _, f := range files {
		if err := run(ctx, "", logw, "dpkg", "-x", f, root); err != nil {
			return fmt.Errorf("dpkg -x %s: %w", filepath.Base(f), err)
		}
	}
	if err := os.RemoveAll(debs); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "packages"), []byte(strings.Join(u.Packages, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	// The judges must be there before the userland counts as ready.
	t := &Userland{Suite: u.Suite, Dir: tmp}
	for _, j := range judges {
		if _, err := t.find(j.candidates); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(u.Dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, u.Dir); err != nil {
		return err
	}
	if err := os.Chmod(u.Dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(u.Dir, ".ready"), nil, 0o644)
}

// resolvePackages returns the seeds and, transitively, the Depends and
// Pre-Depends that userlandFollows, as sorted "name version" lines of apt's
// candidates. Of alternatives ("a | b") the first is taken.
func resolvePackages(ctx context.Context, a *Apt, seeds []string) ([]string, error) {
	versions := map[string]string{}
	queue := slices.Clone(seeds)
	for len(queue) > 0 {
		batch := queue
		queue = nil
		out, err := a.Command(ctx, "apt-cache", append([]string{"show", "--no-all-versions"}, batch...)...).Output()
		if err != nil && len(out) == 0 {
			return nil, fmt.Errorf("apt-cache show %s: %w", strings.Join(batch, " "), err)
		}
		for _, st := range parseStanzas(string(out)) {
			name := st["Package"]
			if _, seen := versions[name]; seen || name == "" {
				continue
			}
			versions[name] = st["Version"]
			for _, dep := range depNames(st["Pre-Depends"] + ", " + st["Depends"]) {
				if _, seen := versions[dep]; !seen && userlandFollows(dep) && !slices.Contains(queue, dep) {
					queue = append(queue, dep)
				}
			}
		}
		for _, n := range batch {
			if _, ok := versions[n]; !ok {
				return nil, fmt.Errorf("package %s has no candidate in %s", n, a.Suite)
			}
		}
	}
	var pkgs []string
	for n, v := range versions {
		pkgs = append(pkgs, n+" "+v)
	}
	slices.Sort(pkgs)
	return pkgs, nil
}

// parseStanzas splits apt-cache show's output into field maps.
func parseStanzas(out string) []map[string]string {
	var all []map[string]string
	cur := map[string]string{}
	last := ""
	flush := func() {
		if len(cur) > 0 {
			all = append(all, cur)
		}
		cur, last = map[string]string{}, ""
	}
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += "\n" + line
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if ok {
				last = k
				cur[k] = strings.TrimSpace(v)
			}
		}
	}
	flush()
	return all
}

// depNames returns the package names of a Depends field: the first of each
// group of alternatives, without version, architecture qualifier.
func depNames(field string) []string {
	var names []string
	for _, group := range strings.Split(field, ",") {
		first, _, _ := strings.Cut(group, "|")
		first, _, _ = strings.Cut(first, "(")
		first, _, _ = strings.Cut(first, ":")
		if n := strings.TrimSpace(first); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// judge is a program of the release's userland the guest runs in place of
// the host's: where the packages put it, and the guest paths it answers to.
type judge struct {
	name       string
	candidates []string // paths in the unpacked root, merged /usr first
	guest      []string // guest paths: a wrapper each, its base name the argv[0]
}

var judges = []judge{
	{"systemd-modules-load", []string{"usr/lib/systemd/systemd-modules-load", "lib/systemd/systemd-modules-load"},
		[]string{"/usr/lib/systemd/systemd-modules-load"}},
	{"kmod", []string{"usr/bin/kmod", "bin/kmod"},
		[]string{"/usr/libexec/kmod/kmod", "/usr/libexec/kmod/modprobe", "/usr/libexec/kmod/insmod",
			"/usr/libexec/kmod/rmmod", "/usr/libexec/kmod/lsmod", "/usr/libexec/kmod/modinfo", "/usr/libexec/kmod/depmod"}},
}

// find returns the first candidate path that exists in the root.
func (u *Userland) find(candidates []string) (string, error) {
	for _, c := range candidates {
		if p, err := resolveIn(u.Root(), "/"+c); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no package of Debian %s holds any of %s", u.Suite, strings.Join(candidates, " "))
}

// libDirs are the unpacked root's library directories, searched in order
// after an object's RUNPATH.
var libDirs = []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib", "/lib",
	"/usr/lib/x86_64-linux-gnu/systemd", "/usr/lib/systemd", "/lib/systemd"}

// resolveIn resolves guest path p inside root, following symlinks of the
// file and of its directories (absolute ones relative to root, so nothing
// leads out of it), and returns the host path of a regular file.
func resolveIn(root, p string) (string, error) {
	p = path.Clean("/" + p)
	for range 40 {
		dir, err := resolveDirIn(root, path.Dir(p))
		if err != nil {
			return "", err
		}
		p = path.Join(dir, path.Base(p))
		host := filepath.Join(root, p)
		fi, err := os.Lstat(host)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if !fi.Mode().IsRegular() {
				return "", fmt.Errorf("%s is not a regular file", p)
			}
			return host, nil
		}
		t, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(p), t)
		}
		p = path.Clean(t)
	}
	return "", fmt.Errorf("%s: too many links", p)
}

// resolveDirIn resolves the directory links of guest path dir inside root.
func resolveDirIn(root, dir string) (string, error) {
	out := "/"
	for _, part := range strings.Split(strings.Trim(dir, "/"), "/") {
		next := path.Join(out, part)
		for range 40 {
			fi, err := os.Lstat(filepath.Join(root, next))
			if err != nil {
				return "", err
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				break
			}
			t, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				return "", err
			}
			if !path.IsAbs(t) {
				t = path.Join(path.Dir(next), t)
			}
			next = path.Clean(t)
		}
		out = next
	}
	return out, nil
}

// libClosure returns the shared libraries (soname → host path in the root)
// the root's objects bins need: DT_NEEDED through RUNPATH and libDirs, the
// libraries their .note.dlopen notes name and dlopenSonames, when the root
// has them, each with its own closure. A DT_NEEDED library the root lacks is
// an error.
func (u *Userland) libClosure(bins []string) (map[string]string, error) {
	libs := map[string]string{}
	type obj struct{ host, guestDir string }
	var queue []obj
	for _, b := range bins {
		queue = append(queue, obj{b, path.Dir("/" + strings.TrimPrefix(b, u.Root()+"/"))})
	}
	lookup := func(soname string, runpath []string) (string, error) {
		for _, d := range append(runpath, libDirs...) {
			if p, err := resolveIn(u.Root(), path.Join(d, soname)); err == nil {
				return p, nil
			}
		}
		return "", os.ErrNotExist
	}
	addSoname := func(soname string, runpath []string, required bool, from string) error {
		if _, ok := libs[soname]; ok {
			return nil
		}
		p, err := lookup(soname, runpath)
		if err != nil {
			if required {
				return fmt.Errorf("%s needs %s, which Debian %s's packages do not hold", from, soname, u.Suite)
			}
			return nil
		}
		libs[soname] = p
		queue = append(queue, obj{p, ""})
		return nil
	}
	for _, s := range dlopenSonames {
		if err := addSoname(s, nil, false, ""); err != nil {
			return nil, err
		}
	}
	for len(queue) > 0 {
		o := queue[0]
		queue = queue[1:]
		f, err := elf.Open(o.host)
		if err != nil {
			return nil, err
		}
		needed, _ := f.ImportedLibraries()
		var runpath []string
		for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
			vals, _ := f.DynString(tag)
			for _, v := range vals {
				for _, d := range strings.Split(v, ":") {
					if o.guestDir != "" {
						d = strings.ReplaceAll(d, "$ORIGIN", o.guestDir)
					}
					if path.IsAbs(d) {
						runpath = append(runpath, d)
					}
				}
			}
		}
		dl := dlopenNotes(f)
		f.Close()
		for _, n := range needed {
			if err := addSoname(n, runpath, true, filepath.Base(o.host)); err != nil {
				return nil, err
			}
		}
		for _, n := range dl {
			if err := addSoname(n, runpath, false, ""); err != nil {
				return nil, err
			}
		}
	}
	return libs, nil
}

// dlopenNotes returns the sonames an object's .note.dlopen notes name (the
// ELF dlopen metadata systemd ≥ 256 ships: owner "FDO", a JSON array of
// {"soname": [...]} objects).
func dlopenNotes(f *elf.File) []string {
	var names []string
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Name != ".note.dlopen" {
			continue
		}
		if data, err := s.Data(); err == nil {
			names = append(names, parseDlopenNotes(data)...)
		}
	}
	return names
}

// parseDlopenNotes returns the sonames in a .note.dlopen section's notes.
func parseDlopenNotes(data []byte) []string {
	var names []string
	for len(data) >= 12 {
		namesz := binary.LittleEndian.Uint32(data[0:])
		descsz := binary.LittleEndian.Uint32(data[4:])
		off := uint64(12) + uint64(align4(namesz))
		end := off + uint64(align4(descsz))
		if end > uint64(len(data)) || off+uint64(descsz) > uint64(len(data)) {
			break
		}
		desc := bytes.TrimRight(data[off:off+uint64(descsz)], "\x00")
		var entries []struct {
			Soname []string `json:"soname"`
		}
		if json.Unmarshal(desc, &entries) == nil {
			for _, e := range entries {
				names = append(names, e.Soname...)
			}
		}
		data = data[end:]
	}
	return names
}

func align4(n uint32) uint32 { return (n + 3) &^ 3 }

// userlandPrefix is where the guest keeps a release's userland.
func userlandPrefix(suite string) string { return "/opt/debian-" + suite }

// stageUserland puts the judges into the base image's stage: the release's
// programs, libraries and dynamic loader under /opt/debian-<suite>/, and
// at each judge's guest path a wrapper that runs the program through that
// loader with only those libraries (the guest's /usr/lib holds the host's,
// which may be older than the release's programs need).
func (u *Userland) stageUserland(stage string) error {
	prefix := userlandPrefix(u.Suite)
	var bins []string
	for _, j := range judges {
		p, err := u.find(j.candidates)
		if err != nil {
			return err
		}
		bins = append(bins, p)
	}
	libs, err := u.libClosure(bins)
	if err != nil {
		return err
	}
	ld, err := u.find([]string{"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2"})
	if err != nil {
		return err
	}
	if err := copyFile(ld, filepath.Join(stage, prefix, "ld.so")); err != nil {
		return err
	}
	for soname, p := range libs {
		if err := copyFile(p, filepath.Join(stage, prefix, "lib", soname)); err != nil {
			return err
		}
	}
	for i, j := range judges {
		if err := copyFile(bins[i], filepath.Join(stage, prefix, "bin", j.name)); err != nil {
			return err
		}
		for _, g := range j.guest {
			name := path.Base(g)
			if name != j.name {
				if err := os.Symlink(j.name, filepath.Join(stage, prefix, "bin", name)); err != nil && !errors.Is(err, os.ErrExist) {
					return err
				}
			}
			wrapper := fmt.Sprintf("#!/bin/sh\n# Debian %s's %s with its own libraries (internal/guestvm Userland).\n"+
				"exec %s/ld.so --library-path %s/lib %s/bin/%s \"$@\"\n", u.Suite, j.name, prefix, prefix, prefix, name)
			dst := filepath.Join(stage, g)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			_ = os.Remove(dst)
			if err := os.WriteFile(dst, []byte(wrapper), 0o755); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(stage, prefix, "packages"), []byte(strings.Join(u.Packages, "\n")+"\n"), 0o644)
}

// Command runs the root's program prog (a path in the root, e.g.
// "sbin/depmod") on the host through the root's own dynamic loader and
// libraries.
func (u *Userland) Command(ctx context.Context, prog string, args ...string) (*exec.Cmd, error) {
	bin, err := u.find([]string{"usr/" + strings.TrimPrefix(prog, "usr/"), prog})
	if err != nil {
		return nil, err
	}
	ld, err := u.find([]string{"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"})
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, d := range libDirs {
		dirs = append(dirs, filepath.Join(u.Root(), d))
	}
	// argv[0] must keep the program's name (kmod dispatches on it): run
	// it through a link with that name when the file is a multi-call one.
	name := path.Base(prog)
	if filepath.Base(bin) != name {
		link := filepath.Join(u.Dir, "bin", name)
		if !exists(link) {
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				return nil, err
			}
			if err := os.Symlink(bin, link); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, err
			}
		}
		bin = link
	}
	full := append([]string{"--library-path", strings.Join(dirs, ":"), bin}, args...)
	return exec.CommandContext(ctx, ld, full...), nil
}

// writeFileAtomic writes data to path through a temporary file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

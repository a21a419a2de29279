// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// BaseFormat is part of every base image's cache key: bump it when BuildBase
// lays the image out differently, so cached images are rebuilt.
const BaseFormat = "guestvm-2"

// HostToolPackages are the host packages whose versions are part of the base
// image's cache key (their files are copied into it).
var HostToolPackages = []string{"busybox-static", "kmod", "ipvsadm", "iproute2", "systemd"}

// baseKeep is how many base images BuildBase keeps per kernel (one per
// manifest set in use).
const baseKeep = 5

// modprobeTripwire is /usr/sbin/modprobe in the guest: anything that runs
// `modprobe` is logged and fails; only the code under test loads modules.
const modprobeTripwire = `#!/bin/sh
echo "modprobe $*" >>/run/ipvs-guard-guest/modprobe.log
echo "modprobe is disabled in the ipvs-guard guest (called with: $*)" >&2
exit 1
`

// GuestInfoDir is the base image's directory describing the guest: release
// (the Debian release whose kernel it boots) and judges (where its
// systemd-modules-load and kmod come from, with their package versions).
const GuestInfoDir = "/usr/lib/ipvs-guard-guest"

// BaseKey hashes everything that goes into a base image: the kernel
// version, its release, BaseFormat, the manifests, the host tools' versions
// and the release's userland (u; nil when the host's tools are the judges).
func BaseKey(ctx context.Context, kver, rel string, ms []Manifest, u *Userland) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", kver, rel, BaseFormat)
	if u != nil {
		fmt.Fprintf(h, "userland %s %s\n", u.Suite, u.Key)
	}
	for _, m := range ms {
		io.WriteString(h, m.Raw)
	}
	out, _ := exec.CommandContext(ctx, "dpkg-query", append([]string{"-W", "-f=${Package} ${Version}\n"}, HostToolPackages...)...).Output()
	h.Write(out)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// BuildBase builds (once per BaseKey, under flock) the cached base
// initramfs for kernel kver in kdir: busybox, the manifests' tools and
// libraries, the kernel's module closure and all of depmod's index files.
// With a userland u, the release's systemd-modules-load and kmod replace
// the host's (Userland). It returns the .cpio's path.
func BuildBase(ctx context.Context, kver, kdir, rel string, ms []Manifest, u *Userland, logw io.Writer) (string, error) {
	key := BaseKey(ctx, kver, rel, ms, u)
	out := filepath.Join(kdir, "base-"+key+".cpio")
	if exists(out) {
		now := time.Now()
		return out, os.Chtimes(out, now, now)
	}
	unlock, err := lockFile(filepath.Join(kdir, ".base.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if exists(out) {
		return out, nil
	}
	pruneBases(kdir)
	logf(logw, "building guest base image %s for %s", key, kver)
	stage, err := os.MkdirTemp(kdir, ".stage.")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	if err := stageBase(ctx, stage, kver, kdir, ms, logw); err != nil {
		return "", err
	}
	if err := stageGuestInfo(ctx, stage, rel, u); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	if err := writeCpio(stage, tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// pruneBases keeps the baseKeep base images used last.
func pruneBases(kdir string) {
	bases, _ := filepath.Glob(filepath.Join(kdir, "base-*.cpio"))
	type aged struct {
		path string
		mod  time.Time
	}
	var all []aged
	for _, b := range bases {
		if fi, err := os.Stat(b); err == nil {
			all = append(all, aged{b, fi.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.After(all[j].mod) })
	for i := baseKeep; i < len(all); i++ {
		os.Remove(all[i].path)
	}
}

// stageBase fills stage with the base image's tree.
func stageBase(ctx context.Context, stage, kver, kdir string, ms []Manifest, logw io.Writer) error {
	kroot := filepath.Join(kdir, "root")
	kmods := filepath.Join(kroot, "lib", "modules", kver)
	moddir := filepath.Join(stage, "usr", "lib", "modules", kver)
	// Merged /usr, like Debian 12.
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "proc", "sys", "dev", "run",
		"tmp", "etc/modprobe.d", "etc/modules-load.d", "root", "mnt", "var"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(moddir, 0o755); err != nil {
		return err
	}
	for link, target := range map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib",
		"lib64": "usr/lib64", "var/run": "../run"} {
		if err := os.Symlink(target, filepath.Join(stage, link)); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(stage, "tmp"), 0o777|os.ModeSticky); err != nil {
		return err
	}
	for name, data := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
		"etc/hosts":  "127.0.0.1 localhost guest\n::1 localhost\n",
		"etc/fstab":  "",
	} {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	// depmod's index files, text and binary, exactly as depmod made them.
	indexes, _ := filepath.Glob(filepath.Join(kmods, "modules.*"))
	for _, f := range indexes {
		if err := copyFile(f, filepath.Join(moddir, filepath.Base(f))); err != nil {
			return err
		}
	}

	var modules []string
	for _, m := range ms {
		for _, e := range m.Entries {
			var err error
			switch e.Kind {
			case "module":
				modules = append(modules, e.Arg)
			case "module-dir":
				err = filepath.WalkDir(filepath.Join(kmods, e.Arg), func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() && strings.Contains(d.Name(), ".ko") {
						modules = append(modules, d.Name()[:strings.Index(d.Name(), ".ko")])
					}
					return err
				})
			case "bin":
				err = copyBinary(ctx, e.Arg, stage, e.Dest)
			case "file":
				err = copyTree(ctx, e.Arg, stage, e.Dest)
			case "link":
				dst := filepath.Join(stage, e.Dest)
				if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
					os.Remove(dst)
					err = os.Symlink(e.Arg, dst)
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", e.Source, err)
			}
		}
	}

	rels, err := ModuleClosure(ctx, kroot, kver, modules)
	if err != nil {
		return err
	}
	for _, rel := range rels {
		if err := copyFile(filepath.Join(kmods, rel), filepath.Join(moddir, rel)); err != nil {
			return err
		}
	}
	logf(logw, "guest base: %d kernel modules", len(rels))

	// busybox applets wherever no real tool sits; never the module tools: in
	// the guest only the code under test loads modules (kmod lives off PATH).
	bb := filepath.Join(stage, "usr", "bin", "busybox")
	if err := copyFile("/bin/busybox", bb); err != nil {
		return err
	}
	list, err := exec.CommandContext(ctx, bb, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("busybox --list-full: %w", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		switch path.Base(applet) {
		case "modprobe", "insmod", "rmmod", "lsmod", "depmod", "modinfo", "init", "linuxrc":
			continue
		}
		dst := filepath.Join(stage, "usr", strings.TrimPrefix(applet, "usr/"))
		if exists(dst) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/usr/bin/busybox", dst); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(stage, "usr", "sbin", "modprobe"), []byte(modprobeTripwire), 0o755)
}

// stageGuestInfo writes GuestInfoDir and, with a userland, puts the
// release's judges in place of the host's.
func stageGuestInfo(ctx context.Context, stage, rel string, u *Userland) error {
	info := filepath.Join(stage, GuestInfoDir)
	if err := os.MkdirAll(info, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(info, "release"), []byte(rel+"\n"), 0o644); err != nil {
		return err
	}
	var judges string
	if u != nil {
		if err := u.stageUserland(stage); err != nil {
			return fmt.Errorf("staging Debian %s's systemd-modules-load and kmod: %w", u.Suite, err)
		}
		judges = fmt.Sprintf("Debian %s's own (%s): systemd %s, kmod %s, libc6 %s\n", u.Suite, userlandPrefix(u.Suite),
			u.Version("systemd"), u.Version("kmod"), u.Version("libc6"))
	} else {
		out, _ := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Package} ${Version}, ", "systemd", "kmod", "libc6").Output()
		judges = "the host's: " + strings.TrimSuffix(string(out), ", ") + "\n"
	}
	return os.WriteFile(filepath.Join(info, "judges"), []byte(judges), 0o644)
}

// guestPath maps a host path onto the guest's merged-/usr layout.
func guestPath(p string) string {
	for _, top := range []string{"/bin/", "/sbin/", "/lib/", "/lib64/"} {
		if strings.HasPrefix(p, top) {
			return "/usr" + p
		}
	}
	return p
}

// copyTree copies a host file (following symlinks) or a whole directory into
// stage at dest (default: the same path).
func copyTree(ctx context.Context, src, stage, dest string) error {
	if dest == "" {
		dest = src
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return copyFile(src, filepath.Join(stage, guestPath(dest)))
	}
	dst := filepath.Join(stage, dest)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", src+"/.", dst+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s: %v: %s", src, err, out)
	}
	return nil
}

var (
	lddArrowRE = regexp.MustCompile(`=> (/\S+) `)
	lddPathRE  = regexp.MustCompile(`^\s*(/\S+) \(`)
)

// lddLibraries returns the shared libraries and the loader ldd names for bin.
func lddLibraries(ctx context.Context, bin string) []string {
	out, _ := exec.CommandContext(ctx, "ldd", bin).Output()
	var libs []string
	for line := range strings.Lines(string(out)) {
		if m := lddArrowRE.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		} else if m := lddPathRE.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	slices.Sort(libs)
	return slices.Compact(libs)
}

// copyBinary copies an executable into stage at dest (default: its host
// path) with every shared library ldd names and the dynamic loader.
func copyBinary(ctx context.Context, src, stage, dest string) error {
	if dest == "" {
		dest = src
	}
	if !exists(src) {
		// Not where the manifest says (a host without merged /usr?): use PATH.
		found, err := exec.LookPath(filepath.Base(src))
		if err != nil {
			return fmt.Errorf("binary %s not found on the host", src)
		}
		src = found
	}
	if err := copyFile(src, filepath.Join(stage, guestPath(dest))); err != nil {
		return err
	}
	for _, lib := range lddLibraries(ctx, src) {
		if err := copyFile(lib, filepath.Join(stage, guestPath(lib))); err != nil {
			return err
		}
	}
	return nil
}

// ModuleClosure returns the .ko paths (relative to the kernel's modules
// directory) of the given modules and everything modprobe would load with
// them: modules.dep dependencies and softdep pre/post modules, resolved
// through aliases (kmod's modprobe --show-depends on the unpacked kernel).
func ModuleClosure(ctx context.Context, kroot, kver string, modules []string) ([]string, error) {
	prefix := "insmod " + filepath.Join(kroot, "lib", "modules", kver) + "/"
	var rels []string
	for _, m := range modules {
		base := []string{"-d", kroot, "-S", kver, "--show-depends"}
		out, err := exec.CommandContext(ctx, "modprobe", append(base, "--ignore-install", m)...).Output()
		if err != nil {
			var stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, "modprobe", append(base, m)...)
			cmd.Stderr = &stderr
			if out, err = cmd.Output(); err != nil {
				return nil, fmt.Errorf("module %s: not in kernel %s: %v: %s", m, kver, err, strings.TrimSpace(stderr.String()))
			}
		}
		for line := range strings.Lines(string(out)) {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				rels = append(rels, strings.Fields(rest)[0])
			}
		}
	}
	slices.Sort(rels)
	return slices.Compact(rels), nil
}

// Pack writes the initrd out: the cached base followed by the payload tree
// as a second cpio archive (the kernel unpacks concatenated archives in
// order, later files over earlier ones); gzip-compressed when compress is
// set (smaller, but slower to boot under TCG).
func Pack(ctx context.Context, base, payload, out string, compress bool) error {
	pcpio := out + ".payload.cpio"
	defer os.Remove(pcpio)
	if err := writeCpio(payload, pcpio); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	var w io.Writer = f
	var zw *gzip.Writer
	if compress {
		zw, _ = gzip.NewWriterLevel(f, 1)
		w = zw
	}
	for _, part := range []string{base, pcpio} {
		in, err := os.Open(part)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, in)
		in.Close()
		if err != nil {
			return err
		}
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
	}
	return f.Close()
}

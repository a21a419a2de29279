// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// aptLock serialises apt across the project's scripts (hack/lib.sh apt_ensure).
const aptLock = "/var/lock/ipvs-guard-apt.lock"

// aptStamp records the project's last apt-get update (hack/lib.sh).
const aptStamp = "/var/lib/apt/periodic/ipvs-guard-updated"

// KernelVersion returns the kernel to boot for release rel:
// $GUEST_KERNEL_VERSION, else the version pinned in rel.Pin. If that package
// is neither cached nor in the release's apt index any more (Debian rotates
// kernel ABIs), it falls back to what the release's linux-image-amd64
// depends on today, with a warning on logw.
func KernelVersion(ctx context.Context, rel *Release, cacheDir string, logw io.Writer) (string, error) {
	v := os.Getenv("GUEST_KERNEL_VERSION")
	if v == "" {
		raw, err := os.ReadFile(rel.Pin)
		if err != nil {
			return "", fmt.Errorf("reading the pinned kernel version: %w", err)
		}
		v = firstValue(string(raw))
		if v == "" {
			return "", fmt.Errorf("no kernel version pinned in %s", rel.Pin)
		}
	}
	if _, err := os.Stat(filepath.Join(cacheDir, "guest", v, ".ready")); err == nil {
		return v, nil
	}
	known := func() bool { return rel.Apt.Known(ctx, "linux-image-"+v) }
	if !known() {
		// A fresh machine may have no package lists yet, or old ones.
		if err := rel.Apt.Update(ctx, true, logw); err != nil {
			return "", err
		}
	}
	if known() {
		return v, nil
	}
	out, _ := rel.Apt.Command(ctx, "apt-cache", "depends", "linux-image-amd64").Output()
	cur := dependsKernel(string(out))
	if cur == "" {
		return "", fmt.Errorf("kernel linux-image-%s is not in %s's apt index and linux-image-amd64 names no kernel (apt-get update?)", v, rel.Name)
	}
	logf(logw, "WARNING: pinned kernel %s is no longer in Debian %s's archive; using %s (update %s)", v, rel.Name, cur, rel.Pin)
	return cur, nil
}

// firstValue returns the first line of s that is not blank or a comment,
// without its comment and spaces.
func firstValue(s string) string {
	for line := range strings.Lines(s) {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

var dependsRE = regexp.MustCompile(`(?m)^\s*Depends: linux-image-(\S+)$`)

// dependsKernel returns the kernel version `apt-cache depends
// linux-image-amd64` names first, or "".
func dependsKernel(out string) string {
	if m := dependsRE.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// aptUpdate refreshes apt's package lists under the project's apt lock.
func aptUpdate(ctx context.Context, logw io.Writer) error {
	unlock, err := lockFile(aptLock)
	if err != nil {
		return err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(aptStamp), 0o755); err != nil {
		return err
	}
	return os.WriteFile(aptStamp, nil, 0o644)
}

// KernelDir is where EnsureKernel keeps kernel kver: vmlinuz, vmlinux (when
// it could be unpacked), root/ (the package's files and depmod's indexes)
// and the base images.
func KernelDir(cacheDir, kver string) string {
	return filepath.Join(cacheDir, "guest", kver)
}

// EnsureKernel downloads, unpacks and depmods linux-image-<kver> once (under
// flock, so parallel tiers share one download) and returns KernelDir.
//
// a is the apt that has the package (nil: the host's); u, when set, is the
// kernel's release's userland, whose depmod makes the indexes (nil: the
// host's depmod).
func EnsureKernel(ctx context.Context, cacheDir, kver string, a *Apt, u *Userland, logw io.Writer) (string, error) {
	if a == nil {
		a = &Apt{}
	}
	dir := KernelDir(cacheDir, kver)
	if exists(filepath.Join(dir, ".ready")) {
		if !exists(filepath.Join(dir, "vmlinux")) && !exists(filepath.Join(dir, ".no-vmlinux")) {
			if err := extractVmlinux(dir, dir); err != nil {
				_ = os.WriteFile(filepath.Join(dir, ".no-vmlinux"), nil, 0o644)
			}
		}
		return dir, nil
	}
	guestDir := filepath.Join(cacheDir, "guest")
	if err := os.MkdirAll(guestDir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(guestDir, ".kernel.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if exists(filepath.Join(dir, ".ready")) {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(guestDir, ".kernel-"+kver+".")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// apt-get drops to the _apt user for downloads; give it a directory it may write.
	if err := os.Chmod(tmp, 0o777); err != nil {
		return "", err
	}
	pkg := "linux-image-" + kver
	logf(logw, "downloading %s", pkg)
	dl := a.Command(ctx, "apt-get", "download", "-q", pkg)
	dl.Dir, dl.Stdout, dl.Stderr = tmp, logw, logw
	if err := dl.Run(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %w", pkg, err)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, pkg+"_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d packages", pkg, len(debs))
	}
	logf(logw, "unpacking %s", pkg)
	root := filepath.Join(tmp, "root")
	if err := run(ctx, "", logw, "dpkg", "-x", debs[0], root); err != nil {
		return "", fmt.Errorf("dpkg -x %s: %w", debs[0], err)
	}
	if err := mergeUsr(root, kver); err != nil {
		return "", err
	}
	if !exists(filepath.Join(root, "lib", "modules", kver)) {
		return "", fmt.Errorf("%s has no lib/modules/%s", pkg, kver)
	}
	// The .deb ships no modules.dep and no binary indexes; make them as the
	// postinst would, with the release's own depmod when there is one.
	depmod := exec.CommandContext(ctx, "depmod", "-b", root, kver)
	if u != nil {
		if depmod, err = u.Command(ctx, "sbin/depmod", "-b", root, kver); err != nil {
			return "", err
		}
		logf(logw, "depmod of Debian %s (kmod %s)", u.Suite, u.Version("kmod"))
	}
	depmod.Stdout, depmod.Stderr = logw, logw
	if err := depmod.Run(); err != nil {
		return "", fmt.Errorf("depmod: %w", err)
	}
	if fi, err := os.Stat(filepath.Join(root, "lib", "modules", kver, "modules.dep.bin")); err != nil || fi.Size() == 0 {
		return "", errors.New("depmod made no modules.dep.bin")
	}
	if err := copyFile(filepath.Join(root, "boot", "vmlinuz-"+kver), filepath.Join(tmp, "vmlinuz")); err != nil {
		return "", err
	}
	if err := extractVmlinux(tmp, tmp); err != nil {
		logf(logw, "no PVH vmlinux (%v): booting the bzImage", err)
		if err := os.WriteFile(filepath.Join(tmp, ".no-vmlinux"), nil, 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Remove(debs[0]); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, ".ready"), nil, 0o644)
}

// mergeUsr gives an unpacked kernel package that ships merged-/usr paths
// (Debian 13: usr/lib/modules/<kver>) the /lib link a merged-/usr system
// has, so depmod -b, modprobe -d and the base image find lib/modules.
func mergeUsr(root, kver string) error {
	if exists(filepath.Join(root, "lib")) || !exists(filepath.Join(root, "usr", "lib", "modules", kver)) {
		return nil
	}
	return os.Symlink("usr/lib", filepath.Join(root, "lib"))
}

// xzMagic starts an xz stream, zstdMagic a zstd frame.
var (
	xzMagic   = []byte("\xfd7zXZ\x00")
	zstdMagic = []byte("\x28\xb5\x2f\xfd")
)

// extractVmlinux unpacks the ELF kernel from kdir's bzImage (xz-compressed,
// as Debian 11 and 12 build it, or zstd, as Debian 13 does) into
// out/vmlinux. QEMU boots an ELF kernel with a PVH note directly (Debian sets
// CONFIG_PVH), which skips the firmware and the in-guest decompression:
// several seconds under TCG.
func extractVmlinux(kdir, out string) error {
	bz, err := os.ReadFile(filepath.Join(kdir, "vmlinuz"))
	if err != nil {
		return err
	}
	configs, _ := filepath.Glob(filepath.Join(kdir, "root", "boot", "config-*"))
	if len(configs) == 0 || !fileHasLine(configs[0], "CONFIG_PVH=y") {
		return errors.New("the kernel is not built with CONFIG_PVH")
	}
	var elf []byte
	switch {
	case fileHasLine(configs[0], "CONFIG_KERNEL_ZSTD=y"):
		off := bytes.Index(bz, zstdMagic)
		if off < 0 {
			return errors.New("the bzImage holds no zstd frame")
		}
		d, err := zstd.NewReader(bytes.NewReader(bz[off:]), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return err
		}
		// The frame is followed by the rest of the bzImage, which the
		// decoder then refuses; the ELF before it is whole.
		elf, _ = io.ReadAll(d)
		d.Close()
	default:
		off := bytes.Index(bz, xzMagic)
		if off < 0 {
			return errors.New("the bzImage holds no xz stream")
		}
		// xz complains about the trailing data after the stream; the ELF is whole.
		cmd := exec.Command("xz", "-dc")
		cmd.Stdin = bytes.NewReader(bz[off:])
		elf, _ = cmd.Output()
	}
	if !bytes.HasPrefix(elf, []byte("\x7fELF")) {
		return errors.New("the compressed stream is not an ELF kernel")
	}
	tmp := filepath.Join(out, "vmlinux.tmp")
	if err := os.WriteFile(tmp, elf, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(out, "vmlinux"))
}

// KernelImage returns the image to boot from kdir: the PVH vmlinux when
// there is one and bzImage is false, else the bzImage.
func KernelImage(kdir string, bzImage bool) string {
	if vm := filepath.Join(kdir, "vmlinux"); !bzImage && exists(vm) {
		return vm
	}
	return filepath.Join(kdir, "vmlinuz")
}

// fileHasLine reports whether file has a line equal to line.
func fileHasLine(file, line string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if s.Text() == line {
			return true
		}
	}
	return false
}

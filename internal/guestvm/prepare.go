// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
)

// PrepareOptions configures Prepare.
type PrepareOptions struct {
	// RepoRoot is the checkout (hack/guest/kernels/, base.manifest).
	RepoRoot string
	// Release is the Debian release whose kernel boots (hack/guest/kernels/<release>);
	// "" is DefaultRelease.
	Release string
	// CacheDir is $IPVS_GUARD_CACHE.
	CacheDir string
	// Manifests are read after hack/guest/base.manifest, in order.
	Manifests []Manifest
	// BzImage boots the bzImage through the firmware instead of the PVH vmlinux.
	BzImage bool
	// Log receives progress lines.
	Log io.Writer
}

// Image is a prepared guest: a kernel and a base initramfs.
type Image struct {
	// Release is the Debian release the kernel belongs to.
	Release string
	// KernelVersion is the Debian kernel's version (uname -r).
	KernelVersion string
	// KernelDir is the kernel's cache directory (KernelDir).
	KernelDir string
	// Kernel is the image to boot.
	Kernel string
	// Base is the base initramfs (BuildBase).
	Base string
}

// Manifests returns hack/guest/base.manifest followed by the named
// manifests (paths absolute or relative to repoRoot) and, when there are
// one-off additions, their ExtraManifest.
func Manifests(repoRoot string, names, extraModules, extraBins []string) ([]Manifest, error) {
	var ms []Manifest
	for _, n := range append([]string{"hack/guest/base.manifest"}, names...) {
		if !filepath.IsAbs(n) && !exists(n) {
			n = filepath.Join(repoRoot, n)
		}
		m, err := ReadManifest(n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	if len(extraModules)+len(extraBins) > 0 {
		m, err := ExtraManifest(extraModules, extraBins)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// Prepare does everything up to a bootable base: the kernel version, the
// kernel, the base image. The host packages (the manifests' pkg lines)
// must be installed already (hack/guest/lib.sh guest_prepare).
func Prepare(ctx context.Context, o PrepareOptions) (*Image, error) {
	rel, err := LoadRelease(o.RepoRoot, o.CacheDir, o.Release)
	if err != nil {
		return nil, err
	}
	kver, err := KernelVersion(ctx, rel, o.CacheDir, o.Log)
	if err != nil {
		return nil, err
	}
	var u *Userland
	if !rel.Host {
		if u, err = EnsureUserland(ctx, o.CacheDir, rel.Apt, o.Log); err != nil {
			return nil, fmt.Errorf("preparing Debian %s's userland: %w", rel.Name, err)
		}
	}
	kdir, err := EnsureKernel(ctx, o.CacheDir, kver, rel.Apt, u, o.Log)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", kver, err)
	}
	base, err := BuildBase(ctx, kver, kdir, rel.Name, o.Manifests, u, o.Log)
	if err != nil {
		return nil, fmt.Errorf("guest base image: %w", err)
	}
	return &Image{Release: rel.Name, KernelVersion: kver, KernelDir: kdir, Kernel: KernelImage(kdir, o.BzImage), Base: base}, nil
}

// SPDX-License-Identifier: Apache-2.0

// Package guestvm prepares and boots the project's guest: a stock Debian
// kernel under QEMU with an initramfs built from manifests (see
// hack/guest/README.md). It is the one starter behind the guest tier, the
// end-to-end tier, the demo, the guest benchmarks and the interactive shell
// (hack/guestctl is their command line); internal/nodevm boots its Debian
// node with the same QEMU machine (Machine, Accel).
//
// Preparing, each step cached under $IPVS_GUARD_CACHE/guest/:
//
//   - Kernel: linux-image-<version> from Debian's archive (KernelVersion,
//     EnsureKernel): apt-get download, dpkg -x, depmod -b, and the ELF
//     vmlinux unpacked from the bzImage so QEMU boots it through PVH. Keyed by
//     version, built once under flock.
//   - Base image (BuildBase): busybox, the manifests' tools with their
//     libraries, the kernel's module closure and depmod's indexes, as an
//     uncompressed newc cpio keyed by a hash of the kernel version, the
//     manifests, the host's tool versions and BaseFormat.
//   - Payload (Payload, StageGoTests, Pack): /init, /guest/main, the
//     ipvs-guard binary, test binaries; concatenated after the base.
//
// Booting (Boot): QEMU with the console on stdio, captured to a file,
// optionally echoed and filtered; /init prints "ipvs-guard-guest-exit
// <nonce> <code>" before powering off, and Boot returns that code, or
// ExitCrashed when the marker never came (panic, oops, timeout).
package guestvm

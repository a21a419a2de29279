// SPDX-License-Identifier: Apache-2.0

// Package nodevm boots the node tier's Debian 12 node under QEMU (TCG, or
// KVM where it really works): the root filesystem hack/node/rootfs.sh builds
// from Debian's packages (systemd as PID 1, /etc as Debian ships it, the
// project's pinned guest kernel with an initramfs-tools initrd), copied with
// a test's extra files onto an ext4 disk image (mkfs.ext4 -d) the guest boots
// from as /dev/vda.
//
// A reboot inside the guest is a real one: QEMU resets the machine in the
// same process, the kernel and initrd boot again, and the disk keeps what
// the previous boot wrote. The serial console is captured to a file that
// WaitConsole reads; a poweroff ends the QEMU process.
//
// It owns process lifecycle only; what runs in the guest is the test's
// (systemd units among its Files).
package nodevm

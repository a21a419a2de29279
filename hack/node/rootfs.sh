#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the node tier's Debian 12 root filesystem once and prints its directory:
# debootstrap (minbase) of Debian's own packages from the host's apt mirror, systemd as PID 1,
# /etc exactly as Debian ships it (/etc/modules, /etc/modules-load.d/modules.conf -> ../modules),
# plus the guest kernel the project pins (hack/guest/kernels/bookworm: its modules tree, and an
# initramfs made by Debian's own initramfs-tools in the chroot, as the kernel's postinst would).
# iptables and ipset are there for kube-proxy, which runs on the node as a systemd unit; runc and
# containernetworking-plugins (in /usr/lib/cni) for containerd under the kubelet; apparmor
# (apparmor_parser and its boot unit), so containerd confines containers with its default profile,
# as on any Debian node (the kernel enables AppArmor by default).
# The only additions: /etc/fstab (root on the virtio disk) and /etc/hostname.
#
# Cache: $CACHE_DIR/node/rootfs-<key>/, key = hash of this script, the package list and the kernel
# version; built under flock, so parallel tiers build it once.
source "$(dirname "${BASH_SOURCE[0]}")/../guest/lib.sh"

SUITE=bookworm
PACKAGES=systemd-sysv,udev,kmod,initramfs-tools,iproute2,iptables,ipset,runc,containernetworking-plugins,apparmor

kver=$(guest_kernel_version)
key=$({ cat "${BASH_SOURCE[0]}"; echo "$SUITE $PACKAGES $kver"; } | sha256sum | cut -c1-16)
dir=$CACHE_DIR/node/rootfs-$key
if [ ! -f "$dir/.ready" ]; then
	apt_ensure debootstrap "${GUEST_HOST_PACKAGES[@]}"
	kdir=$(guest_ensure_kernel "$kver")
	mkdir -p "$CACHE_DIR/node"
	(
		flock 9
		[ -f "$dir/.ready" ] && exit 0
		start=$SECONDS
		tmp=$(mktemp -d "$CACHE_DIR/node/.rootfs.XXXXXX")
		mirror=$(debian_mirror)
		log "debootstrap $SUITE ($PACKAGES) from $mirror"
		debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp/root" "$mirror" >&2 ||
			die "debootstrap failed (log: $tmp/root/debootstrap/debootstrap.log)"
		log "kernel $kver: modules and an initramfs-tools initrd"
		mkdir -p "$tmp/root/usr/lib/modules" "$tmp/root/boot"
		cp -a "$kdir/root/lib/modules/$kver" "$tmp/root/usr/lib/modules/"
		cp "$kdir/root/boot/config-$kver" "$kdir/root/boot/System.map-$kver" "$kdir/vmlinuz" "$tmp/root/boot/"
		mv "$tmp/root/boot/vmlinuz" "$tmp/root/boot/vmlinuz-$kver"
		chroot "$tmp/root" mkinitramfs -o "/boot/initrd.img-$kver" "$kver" >&2 || die "mkinitramfs failed"
		echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$tmp/root/etc/fstab"
		echo "debian-node" >"$tmp/root/etc/hostname"
		[ "$(readlink "$tmp/root/etc/modules-load.d/modules.conf")" = ../modules ] ||
			die "Debian's /etc/modules-load.d/modules.conf -> ../modules link is missing"
		rm -rf "$dir"
		mv "$tmp" "$dir"
		touch "$dir/.ready"
		log "built $dir in $((SECONDS - start)) s"
	) 9>"$CACHE_DIR/node/.rootfs.lock"
	[ -f "$dir/.ready" ] || die "rootfs not ready"
fi
echo "$dir"

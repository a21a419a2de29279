# SPDX-License-Identifier: Apache-2.0
# Guest-kernel harness, shell side: installs the host packages and hands over
# to hack/guestctl (internal/guestvm), which prepares the kernel and the
# initramfs and boots QEMU. Source it (it sources ../lib.sh).
#
# Cache layout ($CACHE_DIR/guest/, keyed by the kernel version): <kver>/root/
# (dpkg -x + depmod), <kver>/vmlinuz, <kver>/vmlinux (PVH), <kver>/base-<key>.cpio,
# apt/<suite>/ (private apt state of another Debian release),
# userland/<suite>-<key>/ (that release's systemd, kmod and libraries),
# runs/<name>-<pid>/ (one run; removed after). See hack/guest/README.md.

# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

GUEST_DIR=$REPO_ROOT/hack/guest
# Debian packages the harness needs on the host. systemd provides
# /lib/systemd/systemd-modules-load, which the guest runs as the reference
# when it boots the host's release's kernel; another release's comes from
# that release's packages, read with debian-archive-keyring's keys.
GUEST_HOST_PACKAGES=(qemu-system-x86 busybox-static kmod ipvsadm iproute2 iputils-arping gzip
	xz-utils systemd libc-bin coreutils util-linux debian-archive-keyring)

# guestctl builds hack/guestctl into bin/ (cached by go build) and runs it.
guestctl() {
	(cd "$REPO_ROOT" && go build -o bin/guestctl ./hack/guestctl) || die "building hack/guestctl failed"
	REPO_ROOT=$REPO_ROOT IPVS_GUARD_CACHE=$CACHE_DIR "$REPO_ROOT/bin/guestctl" "$@"
}

# guest_kernel_version prints the Debian kernel to use (hack/guest/kernels/$GUEST_RELEASE,
# default bookworm).
guest_kernel_version() { guestctl kernel-version; }

# guest_ensure_kernel downloads and unpacks linux-image-<kver> once; prints its directory.
guest_ensure_kernel() { guestctl kernel "$1"; }

# guest_prepare installs the host packages: the harness's and those the
# manifests (base.manifest, $GUEST_MANIFESTS, any -manifest arguments) name.
guest_prepare() {
	local pkgs
	pkgs=$(guestctl packages "$@") || die "reading the guest manifests failed"
	# shellcheck disable=SC2086
	apt_ensure "${GUEST_HOST_PACKAGES[@]}" $pkgs
}

# guest_build_ipvs_guard builds the static binary the guest runs.
guest_build_ipvs_guard() {
	(cd "$REPO_ROOT" && make -s build >&2)
	export GUEST_IPVS_GUARD_BIN=$REPO_ROOT/bin/ipvs-guard
}

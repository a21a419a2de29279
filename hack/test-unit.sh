#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier unit: every package's untagged tests with the race detector (fuzz seeds run here too).
# It installs what those tests use from the host, so that it passes on a fresh machine: gcc for
# the race detector (cgo); Debian's systemd (systemd-modules-load, the judge of the
# boot-declaration property test); kmod (its modprobe resolves aliases beside ours); util-linux
# (unshare, for the private mount namespaces tests make their host files in); xz-utils, zstd and
# gzip (modules compressed by the real tools); and the real Debian kernel package the guest tier
# boots, unpacked with depmod's indexes (IPVS_GUARD_DEBIAN_MODULES), for the tests that read a
# complete real module index.
source "$(dirname "$0")/guest/lib.sh"
cd "$REPO_ROOT"
apt_ensure gcc libc6-dev systemd kmod util-linux xz-utils zstd gzip
kver=$(guest_kernel_version)
kdir=$(guest_ensure_kernel "$kver")
export IPVS_GUARD_DEBIAN_MODULES=$kdir/root/lib/modules/$kver
go test -race -count=1 ${UNIT_TEST_FLAGS:-} ./...

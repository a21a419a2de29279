#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: boots a stock Debian kernel under QEMU and shows ipvs-guard
# diagnose find the missing IPVS modules, fix them, and come back healthy.
# Everything it needs is installed and cached by the project's scripts.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

log "preparing the guest kernel (first run: installs QEMU, downloads Debian's kernel; cached after)"
guest_prepare
guest_build_ipvs_guard
run=$CACHE_DIR/guest/runs/demo-$$
mkdir -p "$run"
trap 'rm -rf "$run"' EXIT
guest_stage_payload "$run" "$GUEST_DIR/demo-main.sh" >/dev/null
initrd=$(guest_pack "$GUEST_BASE" "$run")
log "booting Debian's kernel $GUEST_KVER under QEMU (about 20 s without KVM)"
rc=0
GUEST_CONSOLE_FILTER=1 guest_boot "$GUEST_KERNEL" "$initrd" "$run" || rc=$?
exit "$rc"

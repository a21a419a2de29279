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
log "booting Debian's kernel $(guest_kernel_version) under QEMU (about 20 s without KVM)"
guestctl run -name demo -main "$GUEST_DIR/demo-main.sh" -filter

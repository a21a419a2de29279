#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make guest-shell`: an interactive shell in the guest kernel with ipvs-guard
# at /usr/local/bin/ipvs-guard (kmod's tools under /usr/libexec/kmod/).
# QEMU's console: Ctrl-a x quits, `exit` powers off. GUEST_NET=1 for networking.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
guest_prepare
guest_build_ipvs_guard
run=$CACHE_DIR/guest/runs/shell-$$
mkdir -p "$run"
trap 'rm -rf "$run"' EXIT
main=$run/main.sh
printf 'exec sh -l\n' >"$main"
guest_stage_payload "$run" "$main" >/dev/null
initrd=$(guest_pack "$GUEST_BASE" "$run")
GUEST_INTERACTIVE=1 guest_boot "$GUEST_KERNEL" "$initrd" "$run"

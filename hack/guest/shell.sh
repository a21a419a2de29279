#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make guest-shell`: an interactive shell in the guest kernel with ipvs-guard
# at /usr/local/bin/ipvs-guard (kmod's tools under /usr/libexec/kmod/).
# QEMU's console: Ctrl-a x quits, `exit` powers off. GUEST_NET=1 for networking.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
guest_prepare
guest_build_ipvs_guard
guestctl run -name shell -shell

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make test-guest`: builds every package's guest-tagged tests, packs them with
# ipvs-guard into one initramfs and boots the Debian kernel once under QEMU.
# Exit code: the guest's (0 all passed, 1 a package failed), 3 the guest crashed
# or timed out. Knobs: GUEST_PKGS="./pkg/x ./cmd/y", GUEST_RUN=<-test.run regex>,
# GUEST_TIMEOUT (s), GUEST_NET=1, GUEST_MANIFESTS, GUEST_EXTRA_MODULES,
# GUEST_EXTRA_BINS (see hack/guest/README.md).
source "$(dirname "$0")/lib.sh"
source "$GUEST_DIR/tests.sh"
cd "$REPO_ROOT"

echo "--- tier: guest"
guest_prepare
log "vetting guest-tagged code"
go vet -tags guest ./...
guest_build_ipvs_guard
run=$CACHE_DIR/guest/runs/test-$$
mkdir -p "$run"
trap 'rm -rf "$run"' EXIT
stage=$(guest_stage_payload "$run" "$GUEST_DIR/run-tests.sh")
guest_stage_tests "$stage" test
initrd=$(guest_pack "$GUEST_BASE" "$run")
log "initramfs $(du -h "$initrd" | cut -f1) (base $(du -h "$GUEST_BASE" | cut -f1))"
rc=0
guest_boot "$GUEST_KERNEL" "$initrd" "$run" || rc=$?
mkdir -p "$CACHE_DIR/guest/runs"
cp "$run/console.log" "$CACHE_DIR/guest/runs/test-guest.console.log" 2>/dev/null || true
case $rc in
0) log "guest tier passed" ;;
3) die "guest tier: the guest crashed or timed out (console: $CACHE_DIR/guest/runs/test-guest.console.log)" ;;
*) die "guest tier: tests failed in the guest (exit $rc; console: $CACHE_DIR/guest/runs/test-guest.console.log)" ;;
esac

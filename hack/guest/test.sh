#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make test-guest`: builds every package's guest-tagged tests, packs them with
# ipvs-guard into one initramfs and boots the Debian kernel once under QEMU.
# guestctl's exit code: the guest's (0 all passed, 1 a package failed), 3 the
# guest crashed or timed out, 2 the guest could not be prepared. Knobs:
# GUEST_PKGS="./pkg/x ./cmd/y", GUEST_RUN=<-test.run regex>, GUEST_TIMEOUT (s),
# GUEST_NET=1, GUEST_MANIFESTS, GUEST_EXTRA_MODULES, GUEST_EXTRA_BINS
# (see hack/guest/README.md).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

echo "--- tier: guest"
guest_prepare
log "vetting guest-tagged code"
go vet -tags guest ./...
guest_build_ipvs_guard
console=$CACHE_DIR/guest/runs/test-guest.console.log
rc=0
guestctl test -name test -save-console "$console" || rc=$?
case $rc in
0) log "guest tier passed" ;;
2) die "guest tier: preparing the guest failed (see above)" ;;
3) die "guest tier: the guest crashed or timed out (console: $console)" ;;
*) die "guest tier: tests failed in the guest (exit $rc; console: $console)" ;;
esac

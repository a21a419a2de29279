#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make test-guest`: builds the guest-tagged tests, packs them with ipvs-guard
# into one initramfs per kernel and boots each Debian kernel once under QEMU:
# every guest package on the default release's kernel (bookworm), then the
# kernel-dependent packages ($GUEST_KERNEL_PKGS: the module loader, the
# systemd-modules-load property test, diagnose, IPVS netlink) on every other
# pinned release's kernel (hack/guest/kernels/: bullseye, trixie), each judged
# by that release's own systemd-modules-load and kmod.
# `make test-kernels` (--all-packages): every guest package on every kernel.
# guestctl's exit code per kernel: 0 all passed, 1 a package failed, 3 the
# guest crashed or timed out, 2 the guest could not be prepared. Knobs:
# GUEST_RELEASE=<one release> (only that kernel, every package),
# GUEST_RELEASES="bullseye trixie" (those kernels), GUEST_PKGS="./pkg/x ./cmd/y"
# (on the other kernels only those of them in GUEST_KERNEL_PKGS),
# GUEST_KERNEL_PKGS, GUEST_RUN=<-test.run regex>, GUEST_TIMEOUT (s), GUEST_NET=1,
# GUEST_MANIFESTS, GUEST_EXTRA_MODULES, GUEST_EXTRA_BINS (see hack/guest/README.md).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

all_packages=0
[ "${1:-}" = --all-packages ] && all_packages=1

echo "--- tier: guest"
guest_prepare
log "vetting guest-tagged code"
go vet -tags guest ./...
guest_build_ipvs_guard

default=bookworm
if [ -n "${GUEST_RELEASE:-}" ]; then
	releases=$GUEST_RELEASE
	default=$GUEST_RELEASE
else
	releases=${GUEST_RELEASES:-$default $(guestctl releases | grep -vx "$default" | tr '\n' ' ')}
fi
kernel_pkgs=${GUEST_KERNEL_PKGS:-./pkg/modules ./pkg/ipvs}
kernel_property_trees=10

failed=()
summary=()
for rel in $releases; do
	pkgs=${GUEST_PKGS:-}
	if [ "$rel" != "$default" ] && [ "$all_packages" = 0 ]; then
		# The other kernels run the kernel-dependent packages, or those of
		# $GUEST_PKGS that are kernel-dependent.
		if [ -z "$pkgs" ]; then
			pkgs=$kernel_pkgs
		else
			# (`if`, not `&&`: a last package that is not kernel-dependent
			# must not fail the loop under pipefail and end the tier.)
			pkgs=$(for p in $pkgs; do for k in $kernel_pkgs; do if [ "${p%/}" = "${k%/}" ]; then echo "$p"; fi; done; done | tr '\n' ' ')
			[ -n "${pkgs// /}" ] || continue
		fi
	fi
	name=test-guest
	[ "$rel" = bookworm ] || name=test-guest-$rel
	console=$CACHE_DIR/guest/runs/$name.console.log
	log "Debian $rel's kernel: ${pkgs:-every guest package}"
	start=$SECONDS
	rc=0
	trees=${GUEST_PROPERTY_TREES:-}
	pass=${GUEST_ENV_PASS:-}
	if [ "$rel" != "$default" ] && [ "$all_packages" = 0 ]; then
		# The systemd-modules-load property test on fewer random trees than
		# on the default kernel (40): each tree loads modules twice, from
		# .ko.xz on trixie, which TCG makes slow (hack/guest/README.md).
		trees=${trees:-$kernel_property_trees}
	fi
	[ -z "$trees" ] || pass="$pass GUEST_PROPERTY_TREES"
	GUEST_PROPERTY_TREES=$trees GUEST_ENV_PASS=$pass GUEST_RELEASE=$rel GUEST_PKGS=$pkgs \
		guestctl test -name "test-$rel" -save-console "$console" || rc=$?
	took=$((SECONDS - start))
	case $rc in
	0) summary+=("ok    $rel ${took}s") ;;
	2) summary+=("FAIL  $rel ${took}s: preparing the guest failed (see above)") ;;
	3) summary+=("FAIL  $rel ${took}s: the guest crashed or timed out (console: $console)") ;;
	*) summary+=("FAIL  $rel ${took}s: tests failed in the guest (exit $rc; console: $console)") ;;
	esac
	[ "$rc" = 0 ] || failed+=("$rel")
done
log "guest kernels:"
printf '    %s\n' "${summary[@]}" >&2
[ ${#failed[@]} -eq 0 ] || die "guest tier failed on: ${failed[*]}"
log "guest tier passed"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier fresh: runs the lint, unit, fuzz and netns tiers inside a pristine Debian 12 root
# filesystem, so that no tier can pass by leaning on what the host, an earlier run, another tier
# or a hand install left behind (a file in /etc, a package, a cache).
#
# The root is debootstrap's minbase of bookworm plus what a fresh machine of this project's
# kind has before it runs anything of ours (make, git, ca-certificates) and apt's sources as a
# stock Debian 12 image has them, cached under $CACHE_DIR/fresh/rootfs-<key>/ (key: the suite and
# that list). Every run enters a new copy of it: an overlay whose
# upper layer is thrown away, in a private mount and PID namespace (unshare + chroot). Inside,
# each tier installs what it needs through its own script (apt_ensure), exactly as on a new
# machine. Bound in: the checkout at its own path (read-write: bin/, fuzz findings), the Go
# toolchain and the module cache read-only (GOPROXY=off: every module the tiers build must be
# in go.sum), and two caches that only make a build faster and change no result: the host's Go
# build cache (content-addressed; the unit tier runs with -count=1) and apt's downloaded .debs
# (verified by apt against the suite's signed lists). $IPVS_GUARD_CACHE inside is empty.
#
# FRESH_TIERS overrides the tiers run inside (default: "test-lint test-unit test-fuzz test-netns").
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

SUITE=bookworm
PACKAGES=make,git,ca-certificates
TIERS=${FRESH_TIERS:-test-lint test-unit test-fuzz test-netns}

[ "$(id -u)" -eq 0 ] || die "the fresh tier needs root (debootstrap, mounts, chroot)"
apt_ensure debootstrap util-linux

# The pristine root, built once per package list.
key=$(echo "minbase $SUITE $PACKAGES stock-sources" | sha256sum | cut -c1-16)
base=$CACHE_DIR/fresh
rootfs=$base/rootfs-$key
mkdir -p "$base"
if [ ! -f "$rootfs/.ready" ]; then
	(
		flock 9
		[ -f "$rootfs/.ready" ] && exit 0
		start=$SECONDS
		tmp=$(mktemp -d "$base/.rootfs.XXXXXX")
		mirror=$(debian_mirror)
		log "debootstrap $SUITE (minbase + $PACKAGES) from $mirror"
		debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp/root" "$mirror" >&2 ||
			die "debootstrap failed (log: $tmp/root/debootstrap/debootstrap.log)"
		# apt's sources as a stock Debian 12 image has them (debootstrap writes only the suite
		# itself): the point-release updates and the security archive, where current kernels are.
		rm -f "$tmp/root/etc/apt/sources.list"
		cat >"$tmp/root/etc/apt/sources.list.d/debian.sources" <<-EOF
			Types: deb
			URIs: $mirror
			Suites: $SUITE $SUITE-updates
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

			Types: deb
			URIs: ${mirror%/debian*}/debian-security
			Suites: $SUITE-security
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		EOF
		rm -f "$tmp/root/var/cache/apt/archives/"*.deb
		rm -rf "$rootfs"
		mv "$tmp/root" "$rootfs"
		rmdir "$tmp"
		touch "$rootfs/.ready"
		log "built $rootfs in $((SECONDS - start)) s"
	) 9>"$base/.rootfs.lock"
fi
[ -f "$rootfs/.ready" ] || die "the fresh root filesystem is not ready ($rootfs)"

# Every module the tiers build, in the module cache the root sees read-only: the main module's
# and the lint tier's staticcheck (hack/tools/staticcheck). The lint tier's go mod tidy check
# also reads the modules of its dependencies' tests, which go mod download leaves out: a
# go mod tidy -diff here fetches them (its verdict is the lint tier's, inside).
for mod in . hack/tools/staticcheck; do
	(cd "$mod" && go mod download && { go mod tidy -diff >/dev/null 2>&1 || true; })
done
goroot=$(go env GOROOT)
modcache=$(go env GOMODCACHE)
gocache=$(go env GOCACHE)
aptcache=$base/apt-archives
mkdir -p "$gocache" "$aptcache/partial"
# A worktree's .git is a file naming the common git directory: bind that too.
gitcommon=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)

run=$(mktemp -d "$base/run.XXXXXX")
trap 'rm -rf "$run"' EXIT
mkdir -p "$run/upper" "$run/work" "$run/root"

log "fresh root: $rootfs (overlay, discarded after the run); tiers: $TIERS"
start=$SECONDS
rc=0
unshare --mount --pid --fork --kill-child --propagation private -- bash -euo pipefail -s -- \
	"$rootfs" "$run" "$REPO_ROOT" "$goroot" "$modcache" "$gocache" "$aptcache" "$gitcommon" "$TIERS" <<'EOS' || rc=$?
rootfs=$1 run=$2 repo=$3 goroot=$4 modcache=$5 gocache=$6 aptcache=$7 gitcommon=$8 tiers=$9
r=$run/root
mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$run/upper,workdir=$run/work" "$r"
mount -t proc proc "$r/proc"
mount -t sysfs sysfs "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs tmpfs "$r/run"
mkdir -p "$r/run/lock"
mount -t tmpfs tmpfs "$r/tmp"
bindro() { mkdir -p "$r$2"; mount --bind "$1" "$r$2"; mount -o remount,bind,ro "$r$2"; }
bindro "$goroot" /usr/local/go
bindro "$modcache" /root/go/pkg/mod
mkdir -p "$r/root/.cache/go-build" "$r/var/cache/apt/archives"
mount --bind "$gocache" "$r/root/.cache/go-build"
mount --bind "$aptcache" "$r/var/cache/apt/archives"
mkdir -p "$r$repo"
mount --bind "$repo" "$r$repo"
if [ -n "$gitcommon" ] && [ "${gitcommon#"$repo"/}" = "$gitcommon" ]; then
	bindro "$gitcommon" "$gitcommon"
fi
# An empty project cache inside: nothing built by an earlier run or another tier.
mkdir -p "$r/fresh-cache"
cp -L /etc/resolv.conf "$r/etc/resolv.conf"
exec chroot "$r" /usr/bin/env -i HOME=/root TERM=dumb CI="${CI:-}" \
	PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	GOMODCACHE=/root/go/pkg/mod GOCACHE=/root/.cache/go-build GOPROXY=off GOTOOLCHAIN=local \
	IPVS_GUARD_CACHE=/fresh-cache FUZZTIME="${FUZZTIME:-}" \
	bash -c 'cd "$1" && shift && git config --global --add safe.directory "*" && exec make $*' bash "$repo" $tiers
EOS
if [ "$rc" -ne 0 ]; then
	die "fresh tier: a tier failed inside the pristine Debian 12 root (exit $rc; its name is above)"
fi
log "fresh tier passed in $((SECONDS - start)) s: $TIERS on a pristine Debian 12 root"

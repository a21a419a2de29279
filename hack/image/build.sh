#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the project's real Dockerfile with Debian's buildah, offline, and
# checks the image: `ipvs-guard version` run in it prints this build's info,
# the OCI labels are set, it runs as non-root 65532, and the binary is static.
#
# No registry is reachable here, so the builder stage uses a local image made
# from scratch with this machine's Go toolchain and busybox (cached by Go
# version), modules come from the local module cache through a file:// GOPROXY
# bind mount, and the runtime stage is scratch (RUNTIME_IMAGE; real builds use
# distroless/static). Tier `make test-image`.
#
# Env: IMAGE (default localhost/ipvs-guard:<version>), VERSION (default: the file VERSION),
# COMMIT, BUILD_DATE; PLATFORM (default linux/<go env GOARCH>): another architecture is
# cross-compiled by the builder stage (GOARCH; the binary is static), checked by its metadata
# and not run; RUNTIME_IMAGE (default scratch; anything else is pulled when missing, e.g.
# gcr.io/distroless/static-debian12:nonroot for a release); IMAGE_ARCHIVE: also write the
# image there as a docker-archive tagged IMAGE (what `ctr images import` and RKE2's
# agent/images directory read).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"

apt_ensure buildah podman runc busybox-static
as_root true

VERSION=${VERSION:-$(cat VERSION)}
PLATFORM=${PLATFORM:-linux/$(go env GOARCH)}
arch=${PLATFORM#linux/}
[ "$PLATFORM" = "linux/$arch" ] && [ -n "$arch" ] || die "PLATFORM=$PLATFORM: want linux/<arch>"
RUNTIME_IMAGE=${RUNTIME_IMAGE:-scratch}
pull=(--pull-never)
[ "$RUNTIME_IMAGE" = scratch ] || pull=()
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
BUILD_DATE=${BUILD_DATE:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
IMAGE=${IMAGE:-localhost/ipvs-guard:$VERSION}
goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
builder=localhost/ipvs-guard-builder:$gover
bah=(as_root buildah --storage-driver overlay)

# 1. The local builder image: Go + busybox (a shell for RUN) + CA bundle.
if ! "${bah[@]}" inspect --type image "$builder" >/dev/null 2>&1; then
	log "making builder image $builder from $goroot and busybox-static"
	ctr=$("${bah[@]}" from --pull-never scratch)
	mnt=$("${bah[@]}" mount "$ctr")
	as_root mkdir -p "$mnt/usr/local" "$mnt/bin" "$mnt/tmp" "$mnt/root" "$mnt/etc/ssl/certs"
	as_root chmod 1777 "$mnt/tmp"
	as_root cp -a "$goroot" "$mnt/usr/local/go"
	as_root cp /bin/busybox "$mnt/bin/busybox"
	for app in $(/bin/busybox --list); do
		[ -e "$mnt/bin/$app" ] || as_root ln -s busybox "$mnt/bin/$app"
	done
	[ -f /etc/ssl/certs/ca-certificates.crt ] && as_root cp /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/"
	echo 'root:x:0:0:root:/root:/bin/sh' | as_root tee "$mnt/etc/passwd" >/dev/null
	"${bah[@]}" umount "$ctr" >/dev/null
	"${bah[@]}" config --env PATH=/usr/local/go/bin:/bin --env HOME=/root --env GOTOOLCHAIN=local \
		--label org.opencontainers.image.description="ipvs-guard local builder ($gover + busybox)" "$ctr"
	"${bah[@]}" commit --quiet --rm "$ctr" "$builder" >/dev/null
fi

# 2. The real Dockerfile, offline.
modproxy=$(go env GOMODCACHE)/cache/download
log "building $IMAGE for $PLATFORM (builder $builder, runtime $RUNTIME_IMAGE, GOPROXY=file://$modproxy)"
start=$SECONDS
"${bah[@]}" bud --isolation=chroot "${pull[@]}" --layers=false --quiet \
	-f Dockerfile -t "$IMAGE" --platform "$PLATFORM" \
	-v "$modproxy:/goproxy:ro" \
	--build-arg BUILDER_IMAGE="$builder" \
	--build-arg BUILDPLATFORM="linux/$(go env GOARCH)" \
	--build-arg RUNTIME_IMAGE="$RUNTIME_IMAGE" \
	--build-arg TARGETOS=linux --build-arg TARGETARCH="$arch" \
	--build-arg GOPROXY=file:///goproxy \
	--build-arg VERSION="$VERSION" --build-arg COMMIT="$COMMIT" --build-arg BUILD_DATE="$BUILD_DATE" \
	. >/dev/null
log "built $IMAGE in $((SECONDS - start)) s"

# 3. Check the image's metadata.
fail=0
check() { # check DESCRIPTION GOT WANT
	if [ "$2" = "$3" ]; then log "ok: $1 = $2"; else printf 'FAIL: %s: got %q, want %q\n' "$1" "$2" "$3" >&2; fail=1; fi
}
inspect() { "${bah[@]}" inspect --type image --format "$1" "$IMAGE"; }
check "user" "$(inspect '{{.OCIv1.Config.User}}')" "65532:65532"
check "entrypoint" "$(inspect '{{.OCIv1.Config.Entrypoint}}')" '[/usr/local/bin/ipvs-guard]'
check "label version" "$(inspect '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')" "$VERSION"
check "label revision" "$(inspect '{{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}}')" "$COMMIT"
check "label source" "$(inspect '{{index .OCIv1.Config.Labels "org.opencontainers.image.source"}}')" "https://github.com/ipvs-guard/ipvs-guard"
check "architecture" "$(inspect '{{.OCIv1.Architecture}}')" "$arch"
check "os" "$(inspect '{{.OCIv1.OS}}')" "linux"
if [ -n "${IMAGE_ARCHIVE:-}" ]; then
	mkdir -p "$(dirname "$IMAGE_ARCHIVE")"
	rm -f "$IMAGE_ARCHIVE.tmp"
	"${bah[@]}" push --quiet "$IMAGE" "docker-archive:$IMAGE_ARCHIVE.tmp:$IMAGE" >/dev/null
	mv "$IMAGE_ARCHIVE.tmp" "$IMAGE_ARCHIVE"
	log "wrote $IMAGE_ARCHIVE ($(du -h "$IMAGE_ARCHIVE" | cut -f1)): docker-archive of $IMAGE"
fi
if [ "$arch" != "$(go env GOARCH)" ]; then
	# Another architecture's binary does not run here (no binfmt emulation).
	[ $fail = 0 ] || die "image checks failed"
	log "image checks passed ($PLATFORM: metadata only)"
	exit 0
fi

# 4. Run it: `ipvs-guard version` must print this build's info.
run=(as_root podman --storage-driver overlay run --rm --runtime runc --network none
	--ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$IMAGE")
out=$("${run[@]}" version -o json) || die "running ipvs-guard version in $IMAGE failed"
log "ipvs-guard version -o json in the image: $out"
field() { printf '%s' "$out" | sed -nE "s/.*\"$1\":\"([^\"]*)\".*/\1/p"; }
check "version" "$(field version)" "$VERSION"
check "commit" "$(field commit)" "$COMMIT"
check "buildDate" "$(field buildDate)" "$BUILD_DATE"
check "goVersion" "$(field goVersion)" "$gover"
text=$("${run[@]}" version)
check "version text" "$text" "ipvs-guard $VERSION (commit $COMMIT, built $BUILD_DATE, $gover, linux/$(go env GOARCH))"
# The runtime stage is scratch (no libc, no loader): that it ran at all proves
# the binary is static.

# 5. Figures.

size=$(as_root podman --storage-driver overlay image inspect --format '{{.Size}}' "$IMAGE")
log "image $IMAGE: $size bytes ($((size / 1024 / 1024)) MiB)"
# Keep storage small: drop earlier builds of this repository's image.
for old in $("${bah[@]}" images --format '{{.Name}}:{{.Tag}}' --filter reference=localhost/ipvs-guard 2>/dev/null); do
	[ "$old" = "$IMAGE" ] || "${bah[@]}" rmi "$old" >/dev/null 2>&1 || true
done
[ $fail = 0 ] || die "image checks failed"
log "image checks passed"

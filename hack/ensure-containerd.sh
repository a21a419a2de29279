#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the pinned containerd 2.x (hack/tools/containerd/go.mod) into
# $CACHE_DIR/containerd/<version>/ once: the containerd daemon, containerd-shim-runc-v2 and ctr,
# static (CGO_ENABLED=0) with the build tags of containerd's own static release minus the
# snapshotters that need cgo or kernel features the node does not use (btrfs, devmapper, zfs).
# Prints the directory. The version comes from the tool module, nowhere else.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

moddir=$REPO_ROOT/hack/tools/containerd
pkg=github.com/containerd/containerd/v2
version=$(awk -v p="$pkg" '$1 == p {print $2}' "$moddir/go.mod")
[ -n "$version" ] || die "no $pkg requirement in $moddir/go.mod"
out=$CACHE_DIR/containerd/$version
cmds=(containerd containerd-shim-runc-v2 ctr)
tags="urfave_cli_no_docs osusergo netgo static_build no_btrfs no_devmapper no_zfs"
ready() {
	local c
	for c in "${cmds[@]}"; do [ -x "$out/$c" ] || return 1; done
}
if ! ready; then
	mkdir -p "$out"
	(
		flock 9
		ready && exit 0
		log "building containerd $version into $out (a few minutes cold)"
		start=$SECONDS
		ldflags="-s -w -X $pkg/version.Version=${version#v} -X $pkg/version.Package=$pkg"
		for c in "${cmds[@]}"; do
			t=$tags
			# The shim needs no gRPC server (containerd's Makefile builds it the same way).
			[ "$c" = containerd-shim-runc-v2 ] && t="$t no_grpc"
			(cd "$moddir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags "$t" -ldflags "$ldflags" -o "$out/$c.tmp" "$pkg/cmd/$c")
			mv "$out/$c.tmp" "$out/$c"
		done
		log "built containerd $version in $((SECONDS - start)) s"
	) 9>"$out/.build.lock"
fi
echo "$out"

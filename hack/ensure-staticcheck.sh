#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the pinned staticcheck (hack/tools/staticcheck/go.mod) into
# $CACHE_DIR/staticcheck/<version>/staticcheck once, and prints its path. The version comes from
# the tool module, nowhere else. The build reads only the module cache (go.sum pins every module),
# so it works offline once `go mod download` has run in the tool module, as the fresh tier does.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

moddir=$REPO_ROOT/hack/tools/staticcheck
version=$(awk '$1 == "honnef.co/go/tools" {print $2}' "$moddir/go.mod")
[ -n "$version" ] || die "no honnef.co/go/tools requirement in $moddir/go.mod"
# The Go release is part of the key: staticcheck must understand the language it checks.
gover=$(go env GOVERSION)
out=$CACHE_DIR/staticcheck/$version-$gover/staticcheck
if [ ! -x "$out" ]; then
	log "building staticcheck $version with $gover into $out"
	mkdir -p "$(dirname "$out")"
	(cd "$moddir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -o "$out.tmp.$$" honnef.co/go/tools/cmd/staticcheck)
	mv "$out.tmp.$$" "$out"
fi
echo "$out"

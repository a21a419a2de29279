#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the pinned helm (hack/tools/helm/go.mod) into $CACHE_DIR/helm/<version>/helm
# once, and prints its path. The version comes from the tool module, nowhere else.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

moddir=$REPO_ROOT/hack/tools/helm
version=$(awk '$1 == "helm.sh/helm/v3" {print $2}' "$moddir/go.mod")
[ -n "$version" ] || die "no helm.sh/helm/v3 requirement in $moddir/go.mod"
out=$CACHE_DIR/helm/$version/helm
if [ ! -x "$out" ]; then
	log "building helm $version into $out (a few minutes cold)"
	mkdir -p "$(dirname "$out")"
	(cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out.tmp" helm.sh/helm/v3/cmd/helm)
	mv "$out.tmp" "$out"
fi
echo "$out"

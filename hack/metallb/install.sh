#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the metallb test tier needs: MetalLB's controller and speaker built from the module
# proxy with the pinned tool module in hack/tools/metallb (cached under
# $CACHE_DIR/metallb/<version>/, rebuilt only when missing), MetalLB's CRDs from the same module
# download, and Debian's prometheus, prometheus-alertmanager and iputils-arping. The Debian
# services are never started here (the tests run the binaries on loopback with their own dirs).
#
# Usage: hack/metallb/install.sh
# Prints nothing on stdout except, with PRINT_PATHS=1, "name=path" lines.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

METALLB_VERSION=v0.16.2
TOOL_DIR=$REPO_ROOT/hack/tools/metallb
OUT_DIR=$CACHE_DIR/metallb/$METALLB_VERSION

# module_dir prints the module cache directory of a module the tool module
# requires, downloading it first: `go list -m` alone prints nothing for a
# module not yet in the cache (a fresh machine).
module_dir() {
	local dir
	dir=$(cd "$TOOL_DIR" && GOFLAGS=-mod=mod go mod download "$1" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$1")
	[ -n "$dir" ] && [ -d "$dir" ] || die "module $1 not in the module cache after go mod download"
	echo "$dir"
}

# prepare_src makes $OUT_DIR/src: a copy of the tool module whose frr-k8s replace points at
# v0.0.26's api/v1beta1 package plus the one type and field MetalLB v0.16.2 uses from v0.0.27
# (whose zip the proxy refuses; see hack/tools/metallb/go.mod). Only MetalLB's BGP code uses them.
prepare_src() {
	[ -f "$OUT_DIR/src/.ready" ] && return 0
	local frr
	frr=$(module_dir github.com/metallb/frr-k8s)
	rm -rf "$OUT_DIR/src"
	mkdir -p "$OUT_DIR/src/frr-k8s/api"
	cp "$TOOL_DIR/go.mod" "$TOOL_DIR/go.sum" "$OUT_DIR/src/"
	cp "$frr/go.mod" "$OUT_DIR/src/frr-k8s/"
	cp -r "$frr/api/v1beta1" "$OUT_DIR/src/frr-k8s/api/"
	chmod -R u+w "$OUT_DIR/src"
	local types=$OUT_DIR/src/frr-k8s/api/v1beta1/frrconfiguration_types.go
	grep -q 'PrefixesWithCommunity \[\]CommunityPrefixes' "$types" || die "frr-k8s api changed: $types"
	sed -i 's|^\(\tPrefixesWithCommunity \[\]CommunityPrefixes .*\)$|\1\n\tPrefixesWithAsPathPrepend []AsPathPrependPrefixes `json:"withAsPathPrepend,omitempty"`|' "$types"
	cat >"$OUT_DIR/src/frr-k8s/api/v1beta1/aspathprepend.go" <<-'GO'
		package v1beta1

		// AsPathPrependPrefixes is frr-k8s v0.0.27's type, as MetalLB v0.16.2 uses it.
		type AsPathPrependPrefixes struct {
			AsPathPrepend uint8    `json:"asPathPrepend,omitempty"`
			Prefixes      []string `json:"prefixes,omitempty"`
		}
	GO
	(cd "$OUT_DIR/src" && go mod edit -replace github.com/metallb/frr-k8s=./frr-k8s)
	touch "$OUT_DIR/src/.ready"
}

# build_metallb builds go.universe.tf/metallb/<name> once with fixed flags and caches it by version.
build_metallb() {
	local name=$1 out=$OUT_DIR/$1
	[ -x "$out" ] && return 0
	mkdir -p "$OUT_DIR"
	log "building metallb $name $METALLB_VERSION into $out (cold: a few minutes)"
	local start=$SECONDS
	(
		flock 9
		[ -x "$out" ] && exit 0
		prepare_src
		cd "$OUT_DIR/src"
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags '-s -w' -o "$out.tmp" "go.universe.tf/metallb/$name"
		mv "$out.tmp" "$out"
	) 9>"$OUT_DIR/.build.lock"
	log "built metallb $name in $((SECONDS - start)) s"
}

# copy_crds copies MetalLB's CRDs out of the module download (config/crd/bases/).
copy_crds() {
	[ -f "$OUT_DIR/crds/metallb.io_servicel2statuses.yaml" ] && return 0
	local dir
	dir=$(module_dir go.universe.tf/metallb)
	mkdir -p "$OUT_DIR/crds.tmp"
	cp "$dir"/config/crd/bases/*.yaml "$OUT_DIR/crds.tmp/"
	chmod -R u+w "$OUT_DIR/crds.tmp"
	rm -rf "$OUT_DIR/crds"
	mv "$OUT_DIR/crds.tmp" "$OUT_DIR/crds"
}

apt_ensure iproute2 iputils-arping prometheus prometheus-alertmanager
build_metallb controller
build_metallb speaker
copy_crds
if [ "${PRINT_PATHS:-}" = 1 ]; then
	echo "metallb-controller=$OUT_DIR/controller"
	echo "metallb-speaker=$OUT_DIR/speaker"
	echo "metallb-crds=$OUT_DIR/crds"
	echo "prometheus=$(command -v prometheus)"
	echo "alertmanager=$(command -v prometheus-alertmanager)"
fi
exit 0

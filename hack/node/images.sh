#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the images the node tier imports into the node's containerd (no registry is reachable)
# and prints the path of one docker-archive, which `ctr -n k8s.io images import` reads:
#
#   hack/node/images.sh pause        the pod sandbox image localhost/pause:node: hack/node/pause
#                                    (a static Go pause) on scratch, made with buildah; cached by a
#                                    hash of its source and the Go version.
#   hack/node/images.sh ipvs-guard   localhost/ipvs-guard:node from the project's Dockerfile
#                                    (hack/image/build.sh, which also checks the image); cached by
#                                    a hash of the files its binary is built from.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"

what=${1:?usage: hack/node/images.sh pause|ipvs-guard}
apt_ensure buildah
bah=(as_root buildah --storage-driver overlay)
dir=$CACHE_DIR/node/images
mkdir -p "$dir"

# export_image NAME ARCHIVE writes the image NAME to ARCHIVE as a docker-archive tagged NAME.
export_image() {
	rm -f "$2.tmp"
	"${bah[@]}" push --quiet "$1" "docker-archive:$2.tmp:$1" >/dev/null
	mv "$2.tmp" "$2"
}

case $what in
pause)
	key=$({ cat hack/node/pause/*.go; go env GOVERSION; } | sha256sum | cut -c1-16)
	out=$dir/pause-$key.tar
	name=localhost/pause:node
	if [ ! -f "$out" ]; then
		(
			flock 9
			[ -f "$out" ] && exit 0
			log "building $name"
			tmp=$(mktemp -d)
			trap 'rm -rf "$tmp"' EXIT
			CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/pause" ./hack/node/pause
			ctr=$("${bah[@]}" from --pull-never scratch)
			"${bah[@]}" copy "$ctr" "$tmp/pause" /pause >/dev/null
			"${bah[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
			"${bah[@]}" commit --quiet --rm "$ctr" "$name" >/dev/null
			export_image "$name" "$out"
		) 9>"$dir/.pause.lock"
	fi
	;;
ipvs-guard)
	# The files the image's binary is built from: the Dockerfile, go.mod/go.sum, and the Go and
	# embedded files of every package of this module ./cmd/ipvs-guard imports.
	files=$(go list -deps -f '{{if and (not .Standard) .Module}}{{if .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}
{{end}}{{end}}{{end}}' ./cmd/ipvs-guard)
	# shellcheck disable=SC2086 # one path a line, no spaces in this module's paths
	key=$({ go env GOVERSION; sha256sum Dockerfile go.mod go.sum $files; } | sed "s|$REPO_ROOT/||" | sha256sum | cut -c1-16)
	out=$dir/ipvs-guard-$key.tar
	name=localhost/ipvs-guard:node
	if [ ! -f "$out" ]; then
		(
			flock 9
			[ -f "$out" ] && exit 0
			IMAGE=$name hack/image/build.sh
			export_image "$name" "$out"
		) 9>"$dir/.ipvs-guard.lock"
	fi
	;;
*) die "unknown image $what (want pause or ipvs-guard)" ;;
esac
echo "$out"

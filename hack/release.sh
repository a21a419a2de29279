#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Publishes release VERSION (the file VERSION, which `ipvs-guard version`, the chart's version and
# appVersion and the image tag carry): the image for every platform of PLATFORMS, built from the
# project's Dockerfile with buildah (hack/image/build.sh; other architectures cross-compiled, the
# binary is static), pushed as one multi-arch manifest list to $REGISTRY/ipvs-guard:VERSION; the
# chart packaged (`helm package`) and pushed to oci://$REGISTRY/charts (`helm push`), so that
#
#   helm install ipvs-guard oci://$REGISTRY/charts/ipvs-guard --version VERSION
#
# pulls a chart whose default image is the one pushed. Also writes, for air-gapped nodes, one
# docker-archive per platform (ipvs-guard-VERSION-linux-<arch>.tar, tagged with the pushed name:
# RKE2 imports it from /var/lib/rancher/rke2/agent/images/) and the chart's .tgz into OUT.
# `make release`; .github/workflows/release.yaml runs it for a tag v<VERSION>.
#
# Env: REGISTRY (default ghcr.io/ipvs-guard; credentials as buildah and helm read them),
# PLATFORMS (default linux/amd64,linux/arm64), PLAIN_HTTP=1 for a registry without TLS (tests),
# RELEASE_TAG (the git tag being released: must be v<VERSION>), RUNTIME_IMAGE (default
# gcr.io/distroless/static-debian12:nonroot; scratch builds offline), OUT (default _output/release).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

version=$(cat VERSION)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION: $version is not a semantic version"
if [ -n "${RELEASE_TAG:-}" ] && [ "$RELEASE_TAG" != "v$version" ]; then
	die "tag $RELEASE_TAG does not match VERSION $version (want v$version)"
fi
REGISTRY=${REGISTRY:-ghcr.io/ipvs-guard}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
RUNTIME_IMAGE=${RUNTIME_IMAGE:-gcr.io/distroless/static-debian12:nonroot}
OUT=${OUT:-_output/release}
image=$REGISTRY/ipvs-guard:$version
tls=(--tls-verify=true)
plain=()
if [ "${PLAIN_HTTP:-}" = 1 ]; then
	tls=(--tls-verify=false)
	plain=(--plain-http)
fi

# The chart must describe this release: its version, appVersion and default image.
chart=deploy/ipvs-guard
for field in version appVersion; do
	got=$(sed -nE "s/^$field: \"?([^\"]*)\"?$/\1/p" "$chart/Chart.yaml")
	[ "$got" = "$version" ] || die "$chart/Chart.yaml $field is $got, VERSION is $version"
done
helm=$(hack/ensure-helm.sh)
apt_ensure buildah
bah=(as_root buildah --storage-driver overlay)
mkdir -p "$OUT"

# 1. The chart. Its default image repository is the one pushed below only for the default
# REGISTRY; another registry is set at install (--set image.repository=$REGISTRY/ipvs-guard).
"$helm" lint --strict "$chart"
"$helm" package "$chart" --destination "$OUT" >/dev/null
chart_tgz=$OUT/ipvs-guard-$version.tgz
[ -f "$chart_tgz" ] || die "helm package wrote no $chart_tgz"
log "packaged $chart_tgz"

# 2. One image per platform (one commit and build date for all), then one manifest list.
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
list=localhost/ipvs-guard-release:$version
"${bah[@]}" manifest rm "$list" >/dev/null 2>&1 || true
"${bah[@]}" manifest create "$list" >/dev/null
IFS=, read -ra platforms <<<"$PLATFORMS"
for platform in "${platforms[@]}"; do
	arch=${platform#linux/}
	name=localhost/ipvs-guard-release:$version-$arch
	VERSION=$version COMMIT=$commit BUILD_DATE=$build_date IMAGE=$name PLATFORM=$platform \
		RUNTIME_IMAGE=$RUNTIME_IMAGE hack/image/build.sh
	# The archive carries the name the chart pulls, as RKE2 imports it.
	"${bah[@]}" tag "$name" "$image"
	rm -f "$OUT/ipvs-guard-$version-linux-$arch.tar"
	"${bah[@]}" push --quiet "$image" "docker-archive:$OUT/ipvs-guard-$version-linux-$arch.tar:$image" >/dev/null
	"${bah[@]}" rmi "$image" >/dev/null
	"${bah[@]}" manifest add "$list" "containers-storage:$name" >/dev/null
	log "added $platform to $list"
done

# 3. Push the image and the chart.
start=$SECONDS
"${bah[@]}" manifest push --quiet --all "${tls[@]}" "$list" "docker://$image"
log "pushed $image (${PLATFORMS}) in $((SECONDS - start)) s"
start=$SECONDS
"$helm" push "$chart_tgz" "oci://$REGISTRY/charts" "${plain[@]}"
log "pushed oci://$REGISTRY/charts/ipvs-guard:$version in $((SECONDS - start)) s"
(cd "$OUT" && sha256sum -- *.tgz *.tar >SHA256SUMS)
log "release $version: image $image, chart oci://$REGISTRY/charts/ipvs-guard --version $version, files in $OUT"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the pinned helm (hack/tools/helm/go.mod) into $CACHE_DIR/helm/<version>/helm
# once, and prints its path. The version comes from the tool module, nowhere else.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

moddir=$REPO_ROOT/hack/tools/helm
version=$(awk '$1 == "helm.sh/helm/v3" {print $2}' "$moddir/go.mod")
[ -n "$version" ] || die "no helm.sh/helm/v3 requirement in $moddir/go.mod"
# Helm's default Kubernetes version (for kubeVersion checks and .Capabilities)
# comes from the client-go it is built with, stamped in as its Makefile does.
kminor=$(awk '$1 == "k8s.io/client-go" {split($2, v, "."); print v[2]}' "$moddir/go.mod")
[ -n "$kminor" ] || die "no k8s.io/client-go requirement in $moddir/go.mod"
out=$CACHE_DIR/helm/$version/helm
if [ ! -x "$out" ]; then
	log "building helm $version into $out (a few minutes cold)"
	mkdir -p "$(dirname "$out")"
	(cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
		-X helm.sh/helm/v3/internal/version.version=$version \
		-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kminor \
		-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kminor" -o "$out.tmp" helm.sh/helm/v3/cmd/helm)
	mv "$out.tmp" "$out"
fi
echo "$out"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the apiserver test tier needs: Debian's etcd and a kube-apiserver built from the
# module proxy with the pinned tool module in hack/tools/kube-apiserver. The binary is cached under
# $CACHE_DIR/<name>/<version>/ and rebuilt only when missing.
#
# Usage: hack/apiserver/install.sh [kube-apiserver|kube-proxy|kube-controller-manager|kube-scheduler|kubelet|kubectl|etcd]...   (default: etcd kube-apiserver)
# Prints nothing on stdout except, with PRINT_PATHS=1, "name=path" lines.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

K8S_VERSION=v1.37.1
TOOL_DIR=$REPO_ROOT/hack/tools/kube-apiserver

# k8s_binary_path prints where the cached binary of a k8s.io/kubernetes command lives.
k8s_binary_path() { printf '%s/%s/%s/%s\n' "$CACHE_DIR" "$1" "$K8S_VERSION" "$1"; }

# build_k8s builds k8s.io/kubernetes/cmd/<name> once with fixed flags (-trimpath is part of every
# cache key, so never vary it) and caches the binary keyed by version.
build_k8s() {
	local name=$1 out
	out=$(k8s_binary_path "$name")
	if [ -x "$out" ]; then
		return 0
	fi
	mkdir -p "$(dirname "$out")"
	log "building $name $K8S_VERSION into $out (cold: several minutes)"
	local vpkg=k8s.io/component-base/version
	local ldflags="-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=37"
	ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
	local start=$SECONDS
	# Serialise concurrent builds of the same binary; the second waiter finds it cached.
	(
		flock 9
		[ -x "$out" ] && exit 0
		cd "$TOOL_DIR"
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "k8s.io/kubernetes/cmd/$name"
		mv "$out.tmp" "$out"
	) 9>"$(dirname "$out")/.build.lock"
	log "built $name in $((SECONDS - start)) s"
}

install_etcd() {
	apt_ensure etcd-server
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(etcd kube-apiserver)
for t in "${targets[@]}"; do
	case $t in
	etcd)
		install_etcd
		[ "${PRINT_PATHS:-}" = 1 ] && echo "etcd=$(command -v etcd)"
		;;
	kube-apiserver | kube-proxy | kube-controller-manager | kube-scheduler | kubelet | kubectl)
		build_k8s "$t"
		[ "${PRINT_PATHS:-}" = 1 ] && echo "$t=$(k8s_binary_path "$t")"
		;;
	*) die "unknown component $t" ;;
	esac
done
exit 0

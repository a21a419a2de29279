#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier `node` (test/node): `helm install` of deploy/ipvs-guard into a real control plane on the
# host (kube-apiserver + etcd, kube-controller-manager, kube-scheduler v1.37.1), and the stock
# Debian 12 node (hack/node/rootfs.sh) booted under QEMU and rebooted for real, with the kubelet,
# containerd 2.x (hack/ensure-containerd.sh) and kube-proxy on it running the chart's pod.
# TestHelmInstallControlPlane and the kubelet node's tests run under PodSecurity admission
# enforcing `restricted` outside kube-system (RKE2's CIS profile); TestKubeletNodeRelease runs
# hack/release.sh against go-containerregistry's registry (hack/tools/registry) on the loopback.
# Usage: hack/test-node.sh [--demo]
#   --demo: the node part of `make demo` (TestKubeletNodeDemo), told as a timeline
# Env: RUN, a go test -run pattern (e.g. RUN='TestHelmInstallControlPlane|TestKubeletNodeRelease').
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

apt_ensure e2fsprogs
hack/apiserver/install.sh etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet
HELM=$(hack/ensure-helm.sh)
CONTAINERD_DIR=$(hack/ensure-containerd.sh)
NODE_ROOTFS=$(hack/node/rootfs.sh)
NODE_PAUSE_IMAGE=$(hack/node/images.sh pause)
NODE_AGENT_IMAGE=$(hack/node/images.sh ipvs-guard)
# The OCI registry the release is pushed to (go-containerregistry's, pinned in its own module).
REGISTRY_BIN=$CACHE_DIR/registry/$(sha256sum hack/tools/registry/go.sum hack/tools/registry/main.go | sha256sum | cut -c1-16)/registry
if [ ! -x "$REGISTRY_BIN" ]; then
	mkdir -p "$(dirname "$REGISTRY_BIN")"
	(cd hack/tools/registry && CGO_ENABLED=0 go build -trimpath -o "$REGISTRY_BIN.tmp" .)
	mv "$REGISTRY_BIN.tmp" "$REGISTRY_BIN"
fi
export HELM CONTAINERD_DIR NODE_ROOTFS NODE_PAUSE_IMAGE NODE_AGENT_IMAGE REGISTRY_BIN

if [ "${1:-}" = --demo ]; then
	bin=$(mktemp -d)/node.test
	trap 'rm -rf "$(dirname "$bin")"' EXIT
	go test -c -tags node -o "$bin" ./test/node/
	cd test/node
	NODE_DEMO=1 "$bin" -test.run '^TestKubeletNodeDemo$' -test.count=1 -test.timeout 30m
	exit
fi
go test -tags node -count=1 -timeout 70m -v ${RUN:+-run "$RUN"} ./test/node/

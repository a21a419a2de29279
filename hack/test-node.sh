#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier `node` (test/node): `helm install` of deploy/ipvs-guard into a real control plane on the
# host (kube-apiserver + etcd, kube-controller-manager, kube-scheduler v1.37.1), and the stock
# Debian 12 node (hack/node/rootfs.sh) booted under QEMU and rebooted for real.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

apt_ensure e2fsprogs
hack/apiserver/install.sh etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy
HELM=$(hack/ensure-helm.sh)
NODE_ROOTFS=$(hack/node/rootfs.sh)
export HELM NODE_ROOTFS

go test -tags node -count=1 -timeout 20m -v ./test/node/

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier `node`: `helm install` of deploy/ipvs-guard into a real control plane on the host
# (kube-apiserver + etcd, kube-controller-manager, kube-scheduler v1.37.1; test/node).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

hack/apiserver/install.sh etcd kube-apiserver kube-controller-manager kube-scheduler
HELM=$(hack/ensure-helm.sh)
export HELM

go test -tags node -count=1 -v ./test/node/

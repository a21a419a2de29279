#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier `chart`: helm lint and helm template of deploy/ipvs-guard for several
# value sets with assertions on the output, the schema's rejections, the
# generated README and plain manifest up to date, and every rendering applied
# with `kubectl apply --server-side --dry-run=server` to a real kube-apiserver
# (+ etcd), after prometheus-operator's CRDs; the own-node admission policy and
# RBAC proven with a pod-bound token.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

apt_ensure curl
command -v kubectl >/dev/null || apt_ensure kubectl
HELM=$(hack/ensure-helm.sh)
export HELM
MONITORING_CRDS=$(hack/ensure-monitoring-crds.sh)
export MONITORING_CRDS
log "helm: $("$HELM" version --short)"

"$HELM" lint --strict deploy/ipvs-guard
hack/render-manifests.sh --check
go test -count=1 -run TestREADMEUpToDate ./hack/chartdoc

# A real kube-apiserver + etcd for the dry-run apply and the admission policy
# (internal/apiservertest starts them from these binaries).
hack/apiserver/install.sh etcd kube-apiserver

go test -tags chart -count=1 -v ./deploy/

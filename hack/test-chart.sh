#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier `chart`: helm lint and helm template of deploy/ipvs-guard for several
# value sets with assertions on the output, the schema's rejections, the
# generated README and plain manifest up to date, and every rendering applied
# with `kubectl apply --server-side --dry-run=server` to a real kube-apiserver
# (+ etcd) started here, after prometheus-operator's CRDs.
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

# A real API server for the dry-run apply.
if [ -z "${IPVS_GUARD_TEST_KUBECONFIG:-}" ]; then
	workdir=$(mktemp -d)
	trap 'hack/apiserver-lite.sh stop "$workdir"; rm -rf "$workdir"' EXIT
	if hack/apiserver-lite.sh start "$workdir"; then
		export IPVS_GUARD_TEST_KUBECONFIG=$workdir/kubeconfig
	else
		log "no test API server: TestDryRunOnAPIServer will skip (fail under CI=true)"
	fi
fi

go test -tags chart -count=1 -v ./deploy/

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the slow, version-keyed components the tiers of `make test` ask for (kube-apiserver and
# the other Kubernetes binaries, helm, containerd, MetalLB, the Debian node's root filesystem),
# in the order the tiers need them. .ci/run starts it in the background at the lowest CPU
# priority, so the builds use the core the tiers leave idle (QEMU under TCG uses one) and never
# slow a timed test down.
#
# It changes nothing a tier relies on: each installer builds under flock and marks its cache
# ready, so a tier that needs a component first waits on that lock, and a build that fails here
# is tried again, with its own error, by the tier's own install step. Its output goes to
# $CACHE_DIR/prefetch.log.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

mkdir -p "$CACHE_DIR"
exec >"$CACHE_DIR/prefetch.log" 2>&1
status=0
step() {
	local start=$SECONDS
	if "$@" >/dev/null; then
		log "prefetch: $* ($((SECONDS - start)) s)"
	else
		log "prefetch: $* failed; the tier that needs it will say why"
		status=1
	fi
}
step hack/apiserver/install.sh etcd kube-apiserver
step hack/ensure-helm.sh
step hack/metallb/install.sh
step hack/apiserver/install.sh kube-proxy kube-controller-manager kube-scheduler kubelet
step hack/ensure-containerd.sh
step hack/node/rootfs.sh
exit $status

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier migrate (`make test-migrate`): one node's move from kube-proxy's IPVS mode to nftables
# mode and back, for real. The QEMU guest (Debian's kernel) runs the real kube-proxy v1.37.1,
# MetalLB v0.16.2's speaker and an `ipvs-guard run` agent on a layer-2 segment (a bridge on this
# host) shared with a network-namespace node whose agent probes the LoadBalancer IP; a real
# kube-apiserver and MetalLB's controller run on the host. See hack/migrate/README.md (root needed).
#
# Installs what it needs on a fresh Debian 12 machine: etcd, kube-apiserver and kube-proxy
# (hack/apiserver/install.sh), MetalLB (hack/metallb/install.sh), the guest kernel, QEMU and the
# guest's userland (hack/guest/lib.sh guest_prepare: iptables, ipset, nftables...).
source "$(dirname "${BASH_SOURCE[0]}")/../guest/lib.sh"
cd "$REPO_ROOT"
start=$SECONDS
manifests=(-manifest hack/e2e/guest.manifest -manifest hack/migrate/guest.manifest)
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver kube-proxy
"$REPO_ROOT/hack/metallb/install.sh"
apt_ensure util-linux busybox-static iputils-arping iproute2
guest_prepare "${manifests[@]}"
guestctl base "${manifests[@]}" >/dev/null
log "migrate: components and guest image ready after $((SECONDS - start))s"
bin=$(mktemp -d)/migrate.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -tags migrate -o "$bin" ./test/migrate/
rc=0
as_root env IPVS_GUARD_CACHE="$CACHE_DIR" ${CI:+CI=$CI} ${GUEST_MEMORY:+GUEST_MEMORY=$GUEST_MEMORY} \
	"$bin" -test.count=1 -test.timeout=20m -test.run "${MIGRATE_TEST_RUN:-^TestMigrate$}" -test.v || rc=$?
if [ "$rc" = 0 ]; then
	log "migrate passed in $((SECONDS - start))s wall time"
else
	log "migrate FAILED (exit $rc) after $((SECONDS - start))s"
fi
exit "$rc"

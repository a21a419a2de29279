#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier metallb: the real MetalLB (controller + speakers) on a layer-2 segment of network
# namespaces on this host, plus the QEMU guest (real kernel, real kube-proxy in IPVS mode) on a
# tap of the same bridge, an `ipvs-guard run` agent on every node, a real kube-apiserver, and
# Debian's Prometheus + Alertmanager firing the chart's alert rules into a webhook (root needed).
# Usage: hack/metallb/test.sh [--demo|--bench]
#   --demo:  only the short conflict story of `make demo`
#   --bench: ARP RTT to MetalLB's user-space responder, ipvs-guard vs arping (make bench-metallb)
source "$(dirname "${BASH_SOURCE[0]}")/../guest/lib.sh"
cd "$REPO_ROOT"
"$REPO_ROOT/hack/apiserver/install.sh"
"$REPO_ROOT/hack/metallb/install.sh"
apt_ensure util-linux
if [ -z "${1:-}" ]; then
	# The guest node: the end-to-end tier's image (kube-proxy's iptables, ipset, netfilter modules).
	"$REPO_ROOT/hack/apiserver/install.sh" kube-proxy
	guest_prepare -manifest hack/e2e/guest.manifest
	guestctl base -manifest hack/e2e/guest.manifest >/dev/null
fi
bin=$(mktemp -d)/metallb.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -tags metallb -o "$bin" ./test/metallb/
run=(-test.run "${METALLB_TEST_RUN:-^(TestMetalLBSegment|TestMetalLBCauses|TestMetalLBElection)$}" -test.v)
case "${1:-}" in
--demo) run=(-test.run TestMetalLBDemo) ;;
--bench) run=(-test.run '^$' -test.bench BenchmarkMetalLBSpeakerRTT -test.benchtime 1x) ;;
esac
as_root env IPVS_GUARD_CACHE="$CACHE_DIR" ${CI:+CI=$CI} "$bin" -test.count=1 -test.timeout=30m "${run[@]}"

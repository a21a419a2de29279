#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier metallb: the real MetalLB (controller + speakers) on a layer-2 segment of network
# namespaces on this host, an `ipvs-guard run` agent on every node, a real kube-apiserver, and
# Debian's Prometheus + Alertmanager firing the chart's alert rules into a webhook (root needed).
# Usage: hack/metallb/test.sh [--demo]   (--demo prints the story and skips the slow parts)
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"
"$REPO_ROOT/hack/apiserver/install.sh"
"$REPO_ROOT/hack/metallb/install.sh"
apt_ensure util-linux
exec_flag=()
if [ "$(id -u)" -ne 0 ]; then
	exec_flag=(-exec "sudo -n -E")
fi
run=${METALLB_TEST_RUN:-.}
if [ "${1:-}" = --demo ]; then
	run=TestMetalLBDemo
fi
go test "${exec_flag[@]}" -tags metallb -count=1 -v -timeout 20m -run "$run" ./test/metallb/

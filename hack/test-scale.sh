#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier scale: a CI-sized `make bench-scale`. A real kube-apiserver + etcd with 300 simulated
# nodes (status rewritten every minute), 1,000 LoadBalancer Services with EndpointSlices,
# 2 Services a second churned, and 4 real agents: fails when an agent writes its Node while
# every condition is False, or an agent's RSS exceeds 40 MiB. The product's figure, < 50 MiB with
# 1,000 Nodes and 5,000 Services cached, is make bench-scale's (36.7 / 37.2 MiB avg / max); at this
# size an agent keeps the same 19 MiB of binary and less heap, so 40 MiB fails well above what a
# healthy agent holds. Root (a network namespace).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" -eq 0 ] || die "the scale tier needs root (a network namespace answers ARP for the LoadBalancer IPs)"
apt_ensure iproute2
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR
make -s build
go run ./hack/benchagent -scale -binary bin/ipvs-guard -nodes 300 -services 1000 -agents 4 \
	-churn 2 -window 45s -status-period 1m -max-rss-mib 40 "$@"

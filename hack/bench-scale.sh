#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cluster-scale figures against a real kube-apiserver + etcd: simulated nodes (Node objects whose
# status is rewritten at kubelet's report period), LoadBalancer Services with EndpointSlices,
# Service churn, and real `ipvs-guard run` agents (each over its own host tree; one proxy-ARP
# network namespace answers for every LoadBalancer IP). Per agent per hour: Node writes, watch
# events and bytes by kind (apiserver_watch_events_*), CPU and RSS; API server + etcd CPU over a
# baseline window without agents. Needs root (a network namespace). Defaults: 1,000 nodes,
# 5,000 Services, 20 agents; options are passed to hack/benchagent (e.g. -agents 40 -churn 2).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR
make -s build
go run ./hack/benchagent -scale -binary bin/ipvs-guard -nodes 1000 -services 5000 -agents 20 "$@"

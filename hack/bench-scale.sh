#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cluster-scale figures against a real kube-apiserver + etcd: simulated nodes (Node objects whose
# status is rewritten at kubelet's report period), LoadBalancer Services with EndpointSlices,
# Service churn, and real `ipvs-guard run` agents (each over its own host tree; one proxy-ARP
# network namespace answers for every LoadBalancer IP). Per agent per hour: Node writes, watch
# events and bytes by kind (apiserver_watch_events_*), CPU and RSS; API server + etcd CPU over a
# baseline window without agents. Needs root (a network namespace). Defaults: 1,000 nodes,
# 5,000 Services, 20 agents; options are passed to hack/benchagent (e.g. -agents 40 -churn 2).
#
# -proxy-mode nftables (make bench-scale-nftables) runs the same bench with the agents' kube-proxy
# in nftables mode: the real kube-proxy v1.37.1, as sim-0000's, programs its nftables table for
# every Service and serves /proxyMode, /configz, /metrics and /livez on the loopback, so the
# agents' kube-proxy-sync and nftables-dataplane checks run as on an nftables node. The whole
# bench (API server, kube-proxy, agents) then runs inside a private network namespace, so the
# table is never written into this host's own.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mode=ipvs
prev=
for a in "$@"; do
	case $a in
	-proxy-mode=* | --proxy-mode=*) mode=${a#*=} ;;
	esac
	case $prev in
	-proxy-mode | --proxy-mode) mode=$a ;;
	esac
	prev=$a
done
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR
make -s build
if [ "$mode" != nftables ]; then
	go run ./hack/benchagent -scale -binary bin/ipvs-guard -nodes 1000 -services 5000 -agents 20 "$@"
	exit
fi

apt_ensure iproute2 nftables
"$REPO_ROOT/hack/apiserver/install.sh" kube-proxy
kube_proxy=$(PRINT_PATHS=1 "$REPO_ROOT/hack/apiserver/install.sh" kube-proxy | sed -n 's/^kube-proxy=//p')
tmp=$(mktemp -d)
ns="ipvs-guard-scale-$$"
trap 'ip netns del "$ns" 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/benchagent" ./hack/benchagent
ip netns add "$ns"
# The loopback for the API server, kube-proxy's ports and the agents' health
# ports; a veth with a default route, from which kube-apiserver picks its
# advertise address (the ARP responder's veth comes on top, from benchagent).
ip -n "$ns" link set lo up
ip -n "$ns" link add scl0 type veth peer name scl1
ip -n "$ns" addr add 10.88.0.2/24 dev scl0
ip -n "$ns" link set scl0 up
ip -n "$ns" link set scl1 up
ip -n "$ns" route add default via 10.88.0.1 dev scl0 onlink
ip netns exec "$ns" env BENCH_NETNS="$ns" "$tmp/benchagent" -scale -binary bin/ipvs-guard -kube-proxy "$kube_proxy" \
	-nodes 1000 -services 5000 -agents 20 "$@"

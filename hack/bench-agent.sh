#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Agent figures against a real kube-apiserver: drift-to-condition latency (inotify and uevent
# paths), idle RSS/CPU with 1,000 LoadBalancer Services cached, API writes at steady state.
# Needs root (synthetic kernel uevents). Options are passed to hack/benchagent (e.g. -trials 20).
#
# --netns runs the whole bench (API server, agent, drifts) inside a network namespace where the
# LoadBalancer IPs are on-link and silent: a veth with 198.18.0.254/15 and a default route, its
# peer up in a second namespace with no address. Every ARP round then waits out every probe;
# with 5,000 Services (the default in this mode) and a 5 s resync period the rounds run back to
# back, and the latency figures say whether a module drift waits for one.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
netns=
if [ "${1:-}" = --netns ]; then
	netns=1
	shift
fi
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR
make -s build
go build -o bin/benchagent ./hack/benchagent
if [ -z "$netns" ]; then
	exec bin/benchagent -binary bin/ipvs-guard "$@"
fi

[ "$(id -u)" = 0 ] || die "--netns needs root"
ns=ipvsg-bench-$$ sink=ipvsg-sink-$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; ip netns del "$sink" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$ns"
ip netns add "$sink"
ip -n "$ns" link set lo up
ip -n "$ns" link add bench0 type veth peer name sink0 netns "$sink"
ip -n "$ns" addr add 198.18.0.254/15 dev bench0
ip -n "$ns" link set bench0 up
ip -n "$sink" link set sink0 up
ip -n "$ns" route add default dev bench0
log "netns $ns: 198.18.0.0/15 on-link on bench0, nobody answers ARP"
ip netns exec "$ns" bin/benchagent -binary bin/ipvs-guard -services 5000 -resync-period 5s -idle 30s "$@"

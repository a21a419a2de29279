#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier nftables: the real kube-proxy v1.37.1 in nftables mode on this host's
# own kernel, inside a private network namespace with a real kube-apiserver +
# etcd on its loopback; the kube-proxy-sync and nftables-dataplane checks
# against faults made for real (the table deleted, the ruleset flushed, an
# element deleted, a DNAT map rewritten, a stale endpoint, SIGSTOP, a
# failing transaction, a ghost element and chain, a Local LoadBalancer IP's
# black hole), each verdict compared with `nft -j list table` at the same
# moment; and kube-proxy in iptables mode over iptables-nft, its chains
# removed by `nft flush ruleset` (root). NFTABLES_TEST_FLAGS adds go test
# flags (-run …).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
apt_ensure iproute2 nftables iptables gcc libc6-dev
hack/apiserver/install.sh etcd kube-apiserver kube-proxy
eval "$(PRINT_PATHS=1 hack/apiserver/install.sh kube-apiserver kube-proxy | sed 's/^kube-apiserver=/export KUBE_APISERVER=/; s/^kube-proxy=/export KUBE_PROXY=/')"
ns="ipvs-guard-nft-$$"
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true; rm -rf "$(dirname "${bin:-/nonexistent/x}")"' EXIT
# The node's address on a veth inside the namespace (kube-proxy's NodePorts
# and its node IP), the loopback for the API server.
ip -n "$ns" link set lo up
ip -n "$ns" link add nft0 type veth peer name nft1
ip -n "$ns" addr add 10.88.0.2/24 dev nft0
ip -n "$ns" link set nft0 up
ip -n "$ns" link set nft1 up
# kube-apiserver picks its advertise address from the default route.
ip -n "$ns" route add default via 10.88.0.1 dev nft0 onlink
bin=$(mktemp -d)/nftables.test
go test -c -race -tags nftables -o "$bin" ./test/nftables/
cd test/nftables
# The scale figure runs at 1,000 Services here (NFT_SCALE_SERVICES=10000 for docs/benchmarks.md).
ip netns exec "$ns" env NFT_NETNS="$ns" NODE_IP=10.88.0.2 NFT_SCALE_SERVICES="${NFT_SCALE_SERVICES:-1000}" "$bin" -test.v -test.count=1 ${NFTABLES_TEST_FLAGS:-}

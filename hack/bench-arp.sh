#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ARP and NDP figures: 1,000 IPv4 and 1,000 IPv6 IPs (300 answering)
# classified with a 1 s window vs iputils arping / ndisc6 one by one; RTT vs
# arping and ndisc6 over 100 probes (ndisc6 prints no RTT: both tools' round
# trips are also timed by one sniffer socket); cluster-wide ARP rate with
# sharding (1,000 nodes × 500 IPs, 10 s interval). The first ones build
# network namespaces and need root.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
apt_ensure iproute2 iputils-arping ndisc6 procps
exec_flag=()
if [ "$(id -u)" -ne 0 ]; then
	exec_flag=(-exec "sudo -n -E")
fi
log "ARP probing against arping, NDP probing against ndisc6 (network namespaces)"
go test "${exec_flag[@]}" -tags netns -run '^$' -bench 'BenchmarkNetNS' -benchtime 1x ./pkg/arpcheck/ | tee /dev/stderr | grep '^Benchmark' >/dev/null
log "sharding"
go test -run '^$' -bench . -benchtime 20x ./pkg/arpcheck/shard/

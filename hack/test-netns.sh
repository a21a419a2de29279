#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier netns: tests that build their own topology of network namespaces,
# veth pairs and bridges on this host (root needed) and check the ARP prober
# against iputils arping, and the NDP (IPv6) prober against ndisc6, side by
# side; and the nf_tables probe of the nftables-readiness report in a private
# namespace. procps gives the sysctl the tests set each namespace up with; gcc the race detector.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
apt_ensure iproute2 iputils-arping ndisc6 procps gcc libc6-dev
exec_flag=()
if [ "$(id -u)" -ne 0 ]; then
	exec_flag=(-exec "sudo -n -E")
fi
go test "${exec_flag[@]}" -tags netns -count=1 -race ${NETNS_TEST_FLAGS:-} ./pkg/arpcheck/... ./internal/l2segment/... ./pkg/nftready/...

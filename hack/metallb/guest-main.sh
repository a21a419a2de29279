#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# /guest/main of the metallb tier's guest node: the NIC whose MAC is
# $SEGMENT_MAC (a tap on the segment's bridge) takes $SEGMENT_ADDR, then the
# end-to-end tier's node main runs (netfilter modules for kube-proxy, the
# control endpoint on :8000, reachable over the segment, until the host
# writes the verdict to /run/e2e/done).
set -u
dev=
i=0
while [ -z "$dev" ] && [ $i -lt 50 ]; do
	for d in /sys/class/net/*; do
		[ "$(cat "$d/address")" = "$SEGMENT_MAC" ] && dev=${d##*/}
	done
	[ -n "$dev" ] || sleep 0.1
	i=$((i + 1))
done
[ -n "$dev" ] || { echo "metallb guest: no NIC with MAC $SEGMENT_MAC"; exit 1; }
ip link set "$dev" up && ip addr add "$SEGMENT_ADDR" dev "$dev" || exit 1
mkdir -p /run/e2e
echo "$dev" >/run/e2e/segment-dev
echo "metallb guest: $dev ($SEGMENT_MAC) is $SEGMENT_ADDR on the segment"
exec sh /guest/e2e-main.sh

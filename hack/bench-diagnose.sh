#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Wall time and peak RSS of `ipvs-guard diagnose --root <tree>` over the
# captured host trees (targets: < 50 ms, < 30 MiB). Builds bin/ipvs-guard.
# Usage: hack/bench-diagnose.sh [runs per tree, default 20]
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
runs=${1:-20}
[ -x /usr/bin/time ] || apt_ensure time
make -s build
bin=$REPO_ROOT/bin/ipvs-guard
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
printf "%-12s %-6s %10s %10s %10s %6s\n" tree output median_ms max_ms peak_MiB exit
for tree in pkg/modules/testdata/{debian12,rocky8,centos7,ubuntu2404}; do
	for out in text json; do
		times=() rss=0 code=0
		for _ in $(seq "$runs"); do
			set +e
			start=$(date +%s%N)
			/usr/bin/time -f '%M' -o "$tmp" "$bin" diagnose --root "$tree" --node-name bench -o "$out" >/dev/null 2>&1
			code=$?
			end=$(date +%s%N)
			set -e
			kib=$(tail -1 "$tmp")
			times+=("$(((end - start) / 1000))")
			[ "$kib" -gt "$rss" ] && rss=$kib
		done
		sorted=$(printf '%s\n' "${times[@]}" | sort -n)
		median=$(echo "$sorted" | sed -n "$(((runs + 1) / 2))p")
		max=$(echo "$sorted" | tail -1)
		printf '%-12s %-6s %10.1f %10.1f %10.1f %6s\n' "$(basename "$tree")" "$out" "$(awk -v u="$median" 'BEGIN{print u/1000}')" "$(awk -v u="$max" 'BEGIN{print u/1000}')" "$(awk -v k="$rss" 'BEGIN{print k/1024}')" "$code"
		[ "$median" -lt 50000 ] || die "median wall time $((median / 1000)) ms over 50 ms for $tree"
		[ "$rss" -lt $((30 * 1024)) ] || die "peak RSS ${rss} KiB over 30 MiB for $tree"
	done
done

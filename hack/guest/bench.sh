#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make bench-guest`: runs every guest-tagged Benchmark in the guest kernel and
# prints, for the module-loading benchmark, ipvs-guard's time against kmod's
# `modprobe -a` of the same set (ratio; target <= 1.0).
# Knobs: GUEST_BENCHTIME (default 10x: iterations per round), GUEST_BENCH_COUNT
# (rounds, default 1), GUEST_BENCH=<regex of benchmark functions>, GUEST_TIMEOUT
# (default 1800 s: the 10,000-virtual-server benchmark of bench-ipvs runs here too).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

export GUEST_TIMEOUT=${GUEST_TIMEOUT:-1800}
guest_prepare
guest_build_ipvs_guard
console=$CACHE_DIR/guest/runs/bench-guest.console.log
rc=0
guestctl test -bench -name bench -save-console "$console" -test-arg "-test.count=${GUEST_BENCH_COUNT:-1}" || rc=$?
[ "$rc" = 0 ] || die "guest benchmarks failed (exit $rc)"
export BENCHTIME=${GUEST_BENCHTIME:-10x}

# The benchmark reports <loader>-ms/op and ratio-* metrics; average the rounds.
awk '
/^BenchmarkGuest/ {
	bench = $1; sub(/-[0-9]+$/, "", bench)
	for (i = 3; i < NF; i += 2) { key = bench " " $(i + 1); sum[key] += $(i); n[key]++ }
}
function v(bench, unit) { key = bench " " unit; return n[key] ? sum[key] / n[key] : -1 }
END {
	b = "BenchmarkGuestLoadIPVSSet"
	if (v(b, "kmod-ms/op") < 0) { print "no load benchmark results" > "/dev/stderr"; exit 1 }
	printf "\nLoading ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack (+ nf_defrag_ipv4/6, libcrc32c, crc32c)\n"
	printf "into the guest kernel from nothing, interleaved, mean of %d rounds x %s (TCG: compare ratios):\n", n[b " kmod-ms/op"], ENVIRON["BENCHTIME"]
	printf "  ipvs-guard diagnose --fix (process)        %8.1f ms\n", v(b, "ipvs-guard-ms/op")
	printf "  ipvs-guard native loader (in process)      %8.1f ms\n", v(b, "native-loader-ms/op")
	s = v("BenchmarkGuestNativeLoaderSetup", "ns/op")
	if (s >= 0) printf "    of which reading indexes + modprobe.d    %8.1f ms\n", s / 1e6
	printf "  kmod modprobe -a (process)                 %8.1f ms\n", v(b, "kmod-ms/op")
	printf "  ipvs-guard version (bare process start)    %8.1f ms\n", v(b, "ipvs-guard-version-ms/op")
	printf "  ratio ipvs-guard diagnose --fix / kmod     %8.2f (target <= 1.0)\n", v(b, "ratio-ipvs-guard/kmod")
	printf "  ratio native loader / kmod                 %8.2f\n", v(b, "ratio-native-loader/kmod")
}' "$console"

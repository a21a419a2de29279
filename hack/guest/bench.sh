#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make bench-guest`: runs every guest-tagged Benchmark in the guest kernel and
# prints, for the module-loading benchmark, ipvs-guard's time against kmod's
# `modprobe -a` of the same set (ratio; target <= 1.0).
# Knobs: GUEST_BENCHTIME (default 10x: iterations per round), GUEST_BENCH_COUNT
# (rounds, default 1), GUEST_BENCH=<regex of benchmark functions>.
source "$(dirname "$0")/lib.sh"
source "$GUEST_DIR/tests.sh"
cd "$REPO_ROOT"

guest_prepare
guest_build_ipvs_guard
run=$CACHE_DIR/guest/runs/bench-$$
mkdir -p "$run"
trap 'rm -rf "$run"' EXIT
stage=$(guest_stage_payload "$run" "$GUEST_DIR/run-tests.sh")
guest_stage_tests "$stage" bench
for a in "$stage"/guest/tests/*/args; do
	echo "-test.count=${GUEST_BENCH_COUNT:-1}" >>"$a"
done
initrd=$(guest_pack "$GUEST_BASE" "$run")
rc=0
guest_boot "$GUEST_KERNEL" "$initrd" "$run" || rc=$?
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
}' <(tr -d '\r' <"$run/console.log")

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make bench-guest`: runs every guest-tagged Benchmark in the guest kernel and
# prints, for the module-loading benchmark, ipvs-guard's time against kmod's
# `modprobe -a` of the same set (ratio; target <= 1.0).
# Knobs: GUEST_BENCHTIME (default 5x: iterations per round), GUEST_BENCH_COUNT
# (rounds, default 3), GUEST_BENCH=<regex of benchmark functions>.
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
	echo "-test.count=${GUEST_BENCH_COUNT:-3}" >>"$a"
done
initrd=$(guest_pack "$GUEST_BASE" "$run")
rc=0
guest_boot "$GUEST_KDIR/vmlinuz" "$initrd" "$run" || rc=$?
[ "$rc" = 0 ] || die "guest benchmarks failed (exit $rc)"

# Mean ns/op per sub-benchmark of BenchmarkGuestLoadIPVSSet over all rounds.
awk '
/^BenchmarkGuestLoadIPVSSet\// {
	split($1, p, "/"); name = p[2]; sub(/-[0-9]+$/, "", name)
	for (i = 2; i <= NF; i++) if ($(i) == "ns/op") { sum[name] += $(i - 1); n[name]++ }
}
END {
	if (!n["ipvs-guard"] || !n["kmod-modprobe"]) { print "no load benchmark results" > "/dev/stderr"; exit 1 }
	g = sum["ipvs-guard"] / n["ipvs-guard"]; k = sum["kmod-modprobe"] / n["kmod-modprobe"]
	printf "\nloading ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack (+deps) in the guest kernel, mean of %d rounds:\n", n["ipvs-guard"]
	printf "  ipvs-guard diagnose --fix   %8.1f ms\n", g / 1e6
	printf "  kmod modprobe -a            %8.1f ms\n", k / 1e6
	printf "  ratio ipvs-guard/kmod       %8.2f (target <= 1.0)\n", g / k
}' <(tr -d '\r' <"$run/console.log")

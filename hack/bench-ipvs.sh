#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make bench-ipvs`: in the guest kernel, 10,000 IPVS virtual servers x 2 real
# servers; ipvs-guard's inspection (diagnose, and the in-process table read)
# against `ipvsadm -Ln` of the same table (ratio; target <= 1.0), with the
# peak RSS of both processes; and the agent's resync cost at that size: the
# ipvs check against 10,000 Services, CPU per run and millicores at 1/min,
# under emulation and estimated natively: the same comparison code and the
# same kind of netlink round trips run on the host and in the guest give the
# emulation factors for user-space and kernel CPU.
# Knobs: GUEST_BENCHTIME (default 5x), GUEST_BENCH_COUNT (rounds, default 1).
source "$(dirname "$0")/guest/lib.sh"
cd "$REPO_ROOT"

export GUEST_PKGS=./pkg/ipvs GUEST_BENCH=BenchmarkGuestIPVSInspection
export GUEST_BENCHTIME=${GUEST_BENCHTIME:-5x}
export GUEST_MEMORY=${GUEST_MEMORY:-2G} GUEST_TIMEOUT=${GUEST_TIMEOUT:-1800}
guest_prepare
guest_build_ipvs_guard
console=$CACHE_DIR/guest/runs/bench-ipvs.console.log
rc=0
guestctl test -bench -name bench-ipvs -save-console "$console" \
	-test-arg "-test.count=${GUEST_BENCH_COUNT:-1}" -test-arg -test.timeout=30m || rc=$?
[ "$rc" = 0 ] || die "guest benchmark failed (exit $rc)"

# The same user-space comparison and the same kind of netlink round trips natively, for the
# emulation factors (CPU per op, mean of 5 rounds).
native_cpu() {
	go test -run '^$' -bench "^$2\$" -benchtime "$3" -count 5 "$1" |
		awk -v b="$2" '$1 ~ "^"b { for (i = 3; i < NF; i += 2) if ($(i + 1) == "cpu-ms/op") { s += $(i); n++ } } END { if (n) printf "%.3f", s / n }'
}
compare=$(native_cpu ./pkg/ipvscheck BenchmarkCompare10000 20x)
rtt=$(native_cpu ./pkg/ipvs BenchmarkNetlinkRoundTrips 10x)
[ -n "$compare" ] && [ -n "$rtt" ] || die "native benchmarks gave no result"

NATIVE_COMPARE_MS=$compare NATIVE_RTT_MS=$rtt awk '
/built .* virtual servers/ { sub(/^[ \t]*[^:]*:[0-9]+: /, ""); built = $0 }
/^BenchmarkGuestIPVSInspection/ {
	for (i = 3; i < NF; i += 2) { sum[$(i + 1)] += $(i); n[$(i + 1)]++ }
}
function v(unit) { return n[unit] ? sum[unit] / n[unit] : -1 }
END {
	if (v("ipvsadm-ms/op") < 0) { print "no IPVS benchmark results" > "/dev/stderr"; exit 1 }
	printf "\n%s\n", built
	printf "Inspecting it in the guest kernel (TCG: compare ratios), mean of %d round(s) x %s:\n", n["ipvsadm-ms/op"], ENVIRON["GUEST_BENCHTIME"]
	printf "  ipvs-guard diagnose -o json (process, every check)  %9.1f ms   peak RSS %6.1f MiB\n", v("diagnose-ms/op"), v("diagnose-maxrss-MiB")
	printf "  ipvs-guard table read (in process)                  %9.1f ms\n", v("table-ms/op")
	printf "  ipvsadm -Ln (process)                               %9.1f ms   peak RSS %6.1f MiB\n", v("ipvsadm-ms/op"), v("ipvsadm-maxrss-MiB")
	printf "  agent resync: ipvs check vs 10,000 Services (in process) %4.1f ms, CPU %.1f ms\n", v("resync-ms/op"), v("resync-cpu-ms/op")
	printf "    of it: table read CPU %.1f ms; the comparison alone (table and kube-ipvs0 as read once) CPU %.1f ms\n", v("table-cpu-ms/op"), v("compare-cpu-ms/op")
	printf "    => at the default 1-minute resync: %.2f millicores under emulation (an upper bound)\n", v("resync-cpu-ms/op") / 60
	user = v("compare-cpu-ms/op") / ENVIRON["NATIVE_COMPARE_MS"]
	kernel = v("rtt-cpu-ms/op") / ENVIRON["NATIVE_RTT_MS"]
	printf "  emulation factors (guest CPU / host CPU of the same code):\n"
	printf "    the comparison (BenchmarkCompare10000)              %5.0f  (host %.1f ms)\n", user, ENVIRON["NATIVE_COMPARE_MS"]
	printf "    10,000 netlink round trips (BenchmarkNetlinkRoundTrips) %5.0f  (host %.1f ms)\n", kernel, ENVIRON["NATIVE_RTT_MS"]
	# The user-space CPU of a resync (decoding the netlink answers, the comparison) scales by the
	# user-space factor, the kernel CPU (the netlink dumps of the table and of kube-ipvs0) by the
	# netlink one.
	printf "    the resync under emulation: user %.0f ms, system %.0f ms\n", v("resync-user-ms/op"), v("resync-sys-ms/op")
	est = v("resync-user-ms/op") / user + v("resync-sys-ms/op") / kernel
	printf "    => one resync natively, estimated (user CPU / user-space factor + system CPU / netlink factor):\n"
	printf "       CPU %.0f ms, %.2f millicores at the default 1-minute resync (goal < 5)\n", est, est / 60
	printf "  ratio diagnose / ipvsadm -Ln                        %9.2f (target <= 1.0)\n", v("ratio-diagnose/ipvsadm")
	printf "  ratio table read / ipvsadm -Ln                      %9.2f\n", v("ratio-table/ipvsadm")
}' "$console"

# The ipvs-dataplane check at the same size, natively (pure user space: it reuses the table the
# ipvs check has just read, ipvs.Recent): every Service's real servers against its 3 ready
# endpoints, and a connection table of 10,000 entries. Goal: <= 5 ms per 1,000 Services.
drift=$(native_cpu ./pkg/ipvsdrift BenchmarkDriftCompare10000 20x)
[ -n "$drift" ] || die "BenchmarkDriftCompare10000 gave no result"
awk -v d="$drift" 'BEGIN { printf "  ipvs-dataplane comparison, 10,000 Services x 3 endpoints, natively: CPU %.1f ms per resync, %.2f ms per 1,000 Services (goal <= 5)\n", d, d / 10 }'

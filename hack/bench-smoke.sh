#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every benchmark docs/benchmarks.md, docs/scale.md and the Makefile's bench-* targets name, run
# once with tiny parameters so each keeps working on a fresh clone: the figures mean nothing here,
# only that each bench starts, runs its whole path and exits 0. Needs root (network namespaces,
# synthetic uevents) and the API server; the guest benches boot the guest kernel under QEMU.
#
# Usage: hack/bench-smoke.sh [host|guest|metallb|all]   (default all)
#   host:  bench-diagnose, bench-memory, bench-hostile, bench-agent (and --netns), bench-scale (and
#          in nftables mode),
#          bench-arp (about 4 min on 2 cores with the caches warm, bench-arp's fixed rounds 2 of them)
#   guest: bench-guest's module-loading benchmarks, once under TCG (bench-ipvs: see below)
#   metallb: bench-metallb (already one round: `hack/metallb/test.sh --bench`)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR
which=${1:-all}
[ "$(id -u)" = 0 ] || die "bench-smoke needs root"

smoke() {
	local name=$1
	shift
	local start=$SECONDS
	log "bench-smoke: $name"
	if ! "$@" >"$work/$name.log" 2>&1; then
		tail -n 40 "$work/$name.log" >&2
		die "bench-smoke: $name failed (log above)"
	fi
	log "bench-smoke: $name ok in $((SECONDS - start)) s"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "$which" = host ] || [ "$which" = all ]; then
	# One run each: the wall-time target is for an idle machine; the RSS one holds.
	smoke bench-diagnose hack/bench-diagnose.sh 1 -max-median 10s
	# Files of 64 KiB instead of each kind's limit: the same path, seconds instead of minutes.
	LIMIT_DEP=65536 LIMIT_BUILTIN=65536 LIMIT_BIN=65536 LIMIT_PROCMODULES=65536 LIMIT_CONF=65536 LIMIT_OWNED=65536 \
		smoke bench-memory hack/bench-memory.sh
	smoke bench-hostile hack/bench-hostile.sh
	smoke bench-agent hack/bench-agent.sh -services 20 -trials 1 -idle 3s -spacing 100ms
	smoke bench-agent-netns hack/bench-agent.sh --netns -services 50 -trials 1 -idle 3s -spacing 100ms
	smoke bench-scale hack/bench-scale.sh -nodes 10 -services 20 -agents 2 -window 5s -status-period 5s
	smoke bench-scale-nftables hack/bench-scale.sh -proxy-mode nftables -nodes 10 -services 20 -agents 2 -window 5s -status-period 5s
	smoke bench-arp hack/bench-arp.sh
fi
if [ "$which" = guest ] || [ "$which" = all ]; then
	# The module-loading benchmarks. bench-ipvs (the 10,000-virtual-server one) is not here
	# yet: its table has no size knob, and under TCG on a loaded 2-core machine its
	# `ipvsadm -R` of 30,000 lines outlasts the guest helpers' 2-minute command timeout.
	GUEST_BENCHTIME=1x GUEST_BENCH='BenchmarkGuestLoadIPVSSet|BenchmarkGuestNativeLoaderSetup' \
		smoke bench-guest hack/guest/bench.sh
fi
if [ "$which" = metallb ] || [ "$which" = all ]; then
	smoke bench-metallb hack/metallb/test.sh --bench
fi
log "bench-smoke: every bench ran"

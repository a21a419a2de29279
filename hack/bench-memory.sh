#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Peak RSS of `ipvs-guard diagnose --root` and `diagnose --root --fix` with
# each host file ipvs-guard parses at its size limit (and one byte under
# it), then with all of them at once, against the chart's 128 MiB memory
# limit (deploy/ipvs-guard/values.yaml). Each tree is a copy of
# pkg/modules/testdata/debian12 with one file grown to the size, its content
# valid to the end (the parser's worst case: many short lines, each a new
# module; modules-load.d-ipvs: a modules-load.d file of distinct ip_vs_*
# names, each a stale declaration; modprobe.d: files of distinct install
# commands at the file limit, as many as fill the budget of all modprobe.d
# files together). Peak RSS is the kernel's own figure (/usr/bin/time -v, from
# Debian's time package). The loader's other files (modules.alias, its .bin,
# modules.softdep) are read only when loading into the running kernel,
# never for a --root tree: TestParserMemoryAtLimits in pkg/modules covers
# them.
#
# Usage: hack/bench-memory.sh [BINARY]   (default: builds bin/ipvs-guard)
# The sizes are the limits in pkg/modules (index.go, modulesload.go); set
# LIMIT_<KIND>=BYTES to measure another build at its own limits, e.g.
# LIMIT_DEP=$((64<<20)) LIMIT_OWNED=$((16<<20)) hack/bench-memory.sh old/ipvs-guard
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
apt_ensure time python3
bin=${1:-}
if [[ -z $bin ]]; then
	make -s build
	bin=bin/ipvs-guard
fi
bin=$(realpath "$bin")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rel=6.1.0-56-amd64
budget=$((128 << 20))

: "${LIMIT_DEP:=$((4 << 20))}" "${LIMIT_BUILTIN:=$((1 << 20))}" "${LIMIT_BIN:=$((4 << 20))}"
: "${LIMIT_PROCMODULES:=$((1 << 20))}" "${LIMIT_CONF:=$((16 << 20))}" "${LIMIT_OWNED:=$((1 << 20))}"
: "${LIMIT_MODPROBE:=$((1 << 20))}" "${LIMIT_MODPROBE_TOTAL:=$((256 << 10))}"

# grow FILE SIZE KIND: append valid lines of KIND to FILE until it is SIZE bytes.
grow() {
	python3 - "$@" <<'PY'
import os, sys
path, size, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
head = open(path, "rb").read() if os.path.exists(path) else b""
line = {
    "dep": lambda i: b"m%07x.ko:\n" % i,
    "builtin": lambda i: b"b%07x.ko\n" % i,
    "procmodules": lambda i: b"p%07x 1 0 - Live 0x0\n" % i,
    "conf": lambda i: b"d%07x\n" % i,
    "conf-ipvs": lambda i: b"ip_vs_%07x\n" % i,
    "modprobe": lambda i: b"install i%s_%07x /bin/true\n" % (os.path.basename(path).encode()[:3], i),
    "bin": None,
}[kind]
with open(path, "wb") as f:
    f.write(head)
    n, i = len(head), 0
    if line is None:  # a binary index: its size is what costs
        f.write(b"\0" * (size - n))
        sys.exit(0)
    while True:
        l = line(i)
        if n + len(l) > size:
            break
        f.write(l)
        n += len(l)
        i += 1
    # Pad the last line to the exact size with a comment or spaces.
    pad = size - n
    if pad > 0:
        if kind in ("conf",):
            f.write(b"#" + b" " * (pad - 2) + b"\n" if pad >= 2 else b"\n")
        else:
            f.seek(n - 1)
            f.write(b" " * pad + b"\n")
PY
}

fresh() { # fresh NAME: a new tree at $work/NAME
	rm -rf "${work:?}/$1"
	cp -a pkg/modules/testdata/debian12 "$work/$1"
	echo "$work/$1"
}

# setfile ROOT WHICH SIZE: grow one host file of ROOT to SIZE bytes.
setfile() {
	local r=$1 which=$2 size=$3
	case $which in
	modules.dep) grow "$r/lib/modules/$rel/modules.dep" "$size" dep ;;
	modules.builtin) grow "$r/lib/modules/$rel/modules.builtin" "$size" builtin ;;
	modules.dep.bin) grow "$r/lib/modules/$rel/modules.dep.bin" "$size" bin ;;
	/proc/modules) grow "$r/proc/modules" "$size" procmodules ;;
	modules-load.d) grow "$r/etc/modules-load.d/big.conf" "$size" conf ;;
	modules-load.d-ipvs) grow "$r/etc/modules-load.d/big.conf" "$size" conf-ipvs ;;
	/etc/modules) grow "$r/etc/modules" "$size" conf ;;
	ipvs.conf) grow "$r/etc/modules-load.d/ipvs.conf" "$size" conf ;;
	modprobe.d) # files at the file limit up to SIZE bytes in all
		local i=0 left=$size
		mkdir -p "$r/etc/modprobe.d"
		while ((left > 0)); do
			grow "$r/etc/modprobe.d/f$(printf %02d $i).conf" $((left < LIMIT_MODPROBE ? left : LIMIT_MODPROBE)) modprobe
			left=$((left - LIMIT_MODPROBE)) i=$((i + 1))
		done
		;;
	esac
}

limit_of() {
	case $1 in
	modules.dep) echo "$LIMIT_DEP" ;;
	modules.builtin) echo "$LIMIT_BUILTIN" ;;
	modules.dep.bin) echo "$LIMIT_BIN" ;;
	/proc/modules) echo "$LIMIT_PROCMODULES" ;;
	modules-load.d | modules-load.d-ipvs | /etc/modules) echo "$LIMIT_CONF" ;;
	ipvs.conf) echo "$LIMIT_OWNED" ;;
	modprobe.d) echo "$LIMIT_MODPROBE_TOTAL" ;;
	esac
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

printf '| file | size | run | exit | peak RSS | of 128 MiB |\n|---|---|---|---|---|---|\n'
worst=0
run() { # run LABEL SIZE ROOT ARGS...
	local label=$1 size=$2 root=$3
	shift 3
	local code=0
	/usr/bin/time -v -o "$work/time" "$bin" diagnose --root "$root" --node-name bench \
		--kube-proxy-metrics-address 127.0.0.1:1 --assume-proxy-mode ipvs "$@" >"$work/out" 2>&1 || code=$?
	local kb
	kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time")
	local rss=$((kb * 1024))
	((rss > worst)) && worst=$rss
	local what="diagnose"
	[[ " $* " == *" --fix "* ]] && what="diagnose --fix"
	[[ " $* " == *" nosuch "* ]] && what="$what --scheduler nosuch"
	printf '| %s | %s | %s | %s | %s | %d %% |\n' "$label" "$size" "$what" "$code" "$(mib "$rss")" $((rss * 100 / budget))
	grep -m1 -E 'limit for|too large' "$work/out" | sed 's/^ *//' | cut -c1-160 | sed "s/^/  > /" >&2 || true
}

r=$(fresh baseline)
run "(none)" "-" "$r"
run "(none)" "-" "$r" --fix

for which in modules.dep modules.builtin modules.dep.bin /proc/modules modules-load.d modules-load.d-ipvs /etc/modules ipvs.conf modprobe.d; do
	lim=$(limit_of "$which")
	for size in $((lim - 1)) "$lim"; do
		label="$which"
		[[ $size != "$lim" ]] && label="$which (1 B under)"
		r=$(fresh case)
		setfile "$r" "$which" "$size"
		case $which in
		modules.dep.bin) run "$label" "$(mib "$size")" "$r" --scheduler nosuch ;;
		*)
			run "$label" "$(mib "$size")" "$r"
			cp -a "$r" "$r.fix"
			run "$label" "$(mib "$size")" "$r.fix" --fix
			rm -rf "$r.fix"
			;;
		esac
	done
done

r=$(fresh all)
for which in modules.dep modules.builtin modules.dep.bin /proc/modules modules-load.d /etc/modules ipvs.conf modprobe.d; do
	setfile "$r" "$which" "$(limit_of "$which")"
done
run "all at their limits" "-" "$r" --scheduler nosuch
cp -a "$r" "$r.fix"
run "all at their limits" "-" "$r.fix" --fix
printf '\nworst peak RSS: %s of %s\n' "$(mib "$worst")" "$(mib "$budget")"

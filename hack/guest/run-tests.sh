#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# /guest/main for `make test-guest` and `make bench-guest`: runs every packed
# test binary (/guest/tests/<name>/test) in its package directory with the
# arguments in /guest/tests/<name>/args (one per line), then prints a summary.
#
# Tests named TestGuestLast* change the kernel for good (kernel.modules_disabled=1
# forbids loading and unloading modules until reboot): the first pass skips
# them, a second pass runs them after every package's other tests, in the
# packages whose arguments name them (the default list, or a GUEST_RUN regex
# that spells the name).
rc=0
summary=
# run_pkg <dir> <label> <extra arg>: one package's test binary.
run_pkg() {
	dir=$1 label=$2 extra=$3
	name=$(cat "$dir/package")
	set --
	while IFS= read -r a; do set -- "$@" "$a"; done <"$dir/args"
	echo "=== guest package $name$label"
	start=$(cut -d' ' -f1 /proc/uptime)
	(cd "$dir" && ./test "$@" "$extra")
	code=$?
	end=$(cut -d' ' -f1 /proc/uptime)
	took=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1fs", b - a }')
	if [ "$code" = 0 ]; then
		summary="$summary
ok    $name$label $took"
	else
		summary="$summary
FAIL  $name$label $took (exit $code)"
		rc=1
	fi
}
for dir in /guest/tests/*/; do
	[ -x "$dir/test" ] || continue
	run_pkg "$dir" "" "-test.skip=^TestGuestLast"
done
for dir in /guest/tests/*/; do
	[ -x "$dir/test" ] && grep -q 'TestGuestLast' "$dir/args" || continue
	run_pkg "$dir" " (last)" "-test.run=^TestGuestLast"
done
echo "=== guest summary:$summary"
exit $rc

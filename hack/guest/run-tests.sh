#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# /guest/main for `make test-guest` and `make bench-guest`: runs every packed
# test binary (/guest/tests/<name>/test) in its package directory with the
# arguments in /guest/tests/<name>/args (one per line), then prints a summary.
rc=0
summary=
for dir in /guest/tests/*/; do
	[ -x "$dir/test" ] || continue
	name=$(cat "$dir/package")
	set --
	while IFS= read -r a; do set -- "$@" "$a"; done <"$dir/args"
	echo "=== guest package $name"
	start=$(cut -d' ' -f1 /proc/uptime)
	(cd "$dir" && ./test "$@")
	code=$?
	end=$(cut -d' ' -f1 /proc/uptime)
	took=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1fs", b - a }')
	if [ "$code" = 0 ]; then
		summary="$summary
ok    $name $took"
	else
		summary="$summary
FAIL  $name $took (exit $code)"
		rc=1
	fi
done
echo "=== guest summary:$summary"
exit $rc

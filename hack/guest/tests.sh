# SPDX-License-Identifier: Apache-2.0
# Finding, building and staging guest-tagged Go tests. Sourced by test.sh and
# bench.sh after lib.sh.

# guest_test_files prints every *_test.go carrying the `guest` build tag.
guest_test_files() {
	(cd "$REPO_ROOT" && git ls-files -co --exclude-standard -- '*_test.go' | sort |
		xargs -r grep -lE '^//go:build .*\bguest\b' || true)
}

# guest_test_packages prints the package directories (./x/y) with guest
# tests, restricted to $GUEST_PKGS (space-separated ./dirs) when set.
guest_test_packages() {
	if [ -n "${GUEST_PKGS:-}" ]; then
		printf '%s\n' $GUEST_PKGS
		return
	fi
	guest_test_files | xargs -r -n1 dirname | sort -u | sed 's|^|./|'
}

# guest_funcs prints the names of the functions with the given prefix (Test or
# Benchmark) declared in a package's guest-tagged test files.
guest_funcs() {
	local dir=$1 prefix=$2 f
	for f in "$REPO_ROOT/$dir"/*_test.go; do
		grep -qE '^//go:build .*\bguest\b' "$f" || continue
		sed -nE "s/^func (${prefix}[A-Za-z0-9_]*)\([A-Za-z_][A-Za-z0-9_]* \*testing\.[TB]\).*/\1/p" "$f"
	done | sort -u
}

# guest_stage_tests builds each package's guest test binary into the payload
# ($1) with its testdata and the arguments for mode $2 (test or bench).
# Only the functions from guest-tagged files run: the package's unit tests
# compiled into the same binary stay on the host's unit tier.
guest_stage_tests() {
	local stage=$1 mode=$2 dir n=0
	while read -r dir; do
		[ -n "$dir" ] || continue
		local rel=${dir#./}
		local name=${rel//\//_}
		local out=$stage/guest/tests/$name
		local funcs
		if [ "$mode" = bench ]; then
			funcs=$(guest_funcs "$rel" Benchmark | paste -sd'|')
		else
			funcs=$(guest_funcs "$rel" Test | paste -sd'|')
		fi
		[ -n "$funcs" ] || continue
		mkdir -p "$out"
		log "building guest tests for $dir"
		(cd "$REPO_ROOT" && CGO_ENABLED=0 go test -c -tags guest -trimpath -o "$out/test" "$dir") ||
			die "building guest tests for $dir failed"
		[ -d "$REPO_ROOT/$rel/testdata" ] && cp -a "$REPO_ROOT/$rel/testdata" "$out/"
		echo "$rel" >"$out/package"
		{
			echo "-test.v"
			echo "-test.count=1"
			if [ "$mode" = bench ]; then
				echo "-test.run=^\$"
				echo "-test.bench=^(${GUEST_BENCH:-$funcs})\$"
				echo "-test.benchtime=${GUEST_BENCHTIME:-10x}"
				echo "-test.benchmem"
			else
				echo "-test.run=${GUEST_RUN:-^($funcs)\$}"
				echo "-test.timeout=${GUEST_TEST_TIMEOUT:-5m}"
			fi
		} >"$out/args"
		n=$((n + 1))
	done < <(guest_test_packages)
	[ "$n" -gt 0 ] || die "no guest-tagged ${mode}s found (files with //go:build guest)"
	log "staged $n guest test package(s)"
}

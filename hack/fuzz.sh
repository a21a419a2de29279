#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every Fuzz* target in the module for a short budget (default 20000
# executions each; a target may cap its count, see below). The default is a
# count, not a duration: with a duration,
# Go 1.26's fuzzing coordinator can report "context deadline exceeded" at the
# deadline on a loaded machine without any failing input (golang/go#75804,
# fixed in Go 1.27). A real finding writes its input under testdata/fuzz/.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
fuzztime=${1:-20000x}
n=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
		# A target whose every input costs real work (a directory tree) caps
		# its execution count with a last doc-comment line "// fuzz budget: Nx".
		ft=$fuzztime
		budget=$(grep -B1 -E "^func ${fn}\(" "$file" | sed -nE 's|^// fuzz budget: ([0-9]+)x$|\1|p')
		if [[ -n $budget && $fuzztime =~ ^([0-9]+)x$ ]] && ((BASH_REMATCH[1] > budget)); then
			ft=${budget}x
		fi
		log "fuzz $pkg $fn ($ft)"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$ft" "$pkg"
		n=$((n + 1))
	done
done < <(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go')
log "ran $n fuzz targets"

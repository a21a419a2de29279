#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every Fuzz* target in the module for a short time (default 5s each).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
fuzztime=${1:-5s}
n=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
		log "fuzz $pkg $fn ($fuzztime)"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" "$pkg"
		n=$((n + 1))
	done
done < <(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go')
log "ran $n fuzz targets"

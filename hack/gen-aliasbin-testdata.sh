#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates, with the real depmod, the modules.alias.bin of each test tree:
#   pkg/modules/testdata/aliasbin: from aliases.in ("alias PATTERN MODULE"
#     lines), writing modules.alias and modules.alias.bin;
#   pkg/modules/testdata/debian12/lib/modules/<rel>: from its modules.alias,
#     writing modules.alias.bin (depmod's text output must equal the input).
# One fake module per MODULE (an ELF object whose .modinfo holds the alias=
# strings), in first-appearance order (modules.order), then `depmod -b`. The
# tests compare the binary trie search against the text scan over the two
# files depmod wrote together.
source "$(dirname "$0")/lib.sh"
apt_ensure kmod gcc

# C string literal for one alias value.
cquote() { local s=${1//\\/\\\\}; printf '"alias=%s"' "${s//\"/\\\"}"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gen() {
	local dir=$1 in=$1/aliases.in
	[ -f "$in" ] || in=$dir/modules.alias
	local rel=0.0.0-aliasbin work mods
	work=$tmp/$(basename "$dir")
	mods=$work/lib/modules/$rel
	mkdir -p "$mods/kernel"
	local -A seen=()
	local order=() n=0 kw pattern module m
	while read -r kw pattern module _; do
		[ "$kw" = alias ] || continue
		if [ -z "${seen[$module]:-}" ]; then
			seen[$module]=1
			order+=("$module")
			printf '__attribute__((section(".modinfo"), used, aligned(1))) static const char lic[] = "license=GPL";\n' >"$work/$module.c"
		fi
		n=$((n + 1))
		printf '__attribute__((section(".modinfo"), used, aligned(1))) static const char a%d[] = %s;\n' "$n" "$(cquote "$pattern")" >>"$work/$module.c"
	done <"$in"

	for m in "${order[@]}"; do
		gcc -c -o "$mods/kernel/$m.ko" "$work/$m.c"
		echo "kernel/$m.ko" >>"$mods/modules.order"
	done
	depmod -b "$work" "$rel" 2>/dev/null
	if [ "$in" = "$dir/modules.alias" ]; then
		cmp -s "$mods/modules.alias" "$in" || die "depmod's modules.alias differs from $in (lines not grouped by module?)"
	else
		cp "$mods/modules.alias" "$dir/"
	fi
	cp "$mods/modules.alias.bin" "$dir/"
	log "wrote $dir/modules.alias.bin ($(stat -c %s "$dir/modules.alias.bin") bytes, $(grep -c '^alias' "$dir/modules.alias") aliases)"
}

gen "$REPO_ROOT/pkg/modules/testdata/aliasbin"
gen "$REPO_ROOT/pkg/modules/testdata/debian12/lib/modules/6.1.0-56-amd64"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier lint: gofmt, go vet and staticcheck over every file whatever its build tags (the tier tags
# such as guest, netns or apiserver, found in the files' //go:build lines, all at once; and once
# more with race for the files that switch on it), and a go mod tidy check of the main module and
# of the staticcheck and registry tool modules. staticcheck is the version pinned in hack/tools/staticcheck,
# built from the module cache (hack/ensure-staticcheck.sh), so this tier runs offline once
# `go mod download` has run in both modules, as the fresh tier does before it enters its root.
# The other tool modules (hack/tools/{containerd,helm,kube-apiserver,metallb}) are not checked:
# their go.sum holds only what building the pinned tool needs, not what go mod tidy would add for
# their dependencies' tests.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

gofiles=$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')
gofiles=$(grep -v '/testdata/' <<<"$gofiles")

# The build tags the tree uses, without operating systems, architectures, compilers, Go versions
# and race (a tag the race detector sets, checked in its own pass below).
platform=$(go tool dist list | tr / '\n' | sort -u)
tags=$(xargs sed -n 's#^//go:build ##p' <<<"$gofiles" | grep -o '[A-Za-z_][A-Za-z0-9_.]*' | sort -u |
	grep -vxF -e race -e unix -e cgo -e gc -e gccgo -f <(echo "$platform") | grep -v '^go1\.' | paste -sd, -)
# The packages with a file that builds only with or only without race.
racepkgs=$(xargs grep -l '^//go:build.*\brace\b' <<<"$gofiles" | xargs -r -n1 dirname | sort -u | sed 's#^\([^./]\)#./\1#')
log "build tags: ${tags:-none}; race-tagged packages: ${racepkgs:-none}"

log "gofmt"
out=$(xargs gofmt -l <<<"$gofiles")
[ -z "$out" ] || { echo "$out"; die "gofmt needed in the files above (gofmt -w)"; }

# tidy_check fails when go.mod or go.sum of the module in $1 differs from what go mod tidy writes.
# go mod tidy -diff also reports go.sum lines that are only in another order (which go mod tidy
# itself leaves as they are): a diff that adds back exactly the lines it removes passes.
tidy_check() {
	local out added removed
	out=$(cd "$1" && go mod tidy -diff 2>&1) && return 0
	added=$(grep '^+[^+]' <<<"$out" | cut -c2- | sort || true)
	removed=$(grep '^-[^-]' <<<"$out" | cut -c2- | sort || true)
	if [ -n "$added" ] && [ "$added" = "$removed" ] && ! grep -q '^diff current/go.mod' <<<"$out"; then
		return 0
	fi
	echo "$out"
	die "go mod tidy needed in $1 (the diff above; cd $1 && go mod tidy)"
}
log "go mod tidy check"
tidy_check .
tidy_check hack/tools/staticcheck
# The test registry's own source (a module apart, so its dependency stays out of the main one).
tidy_check hack/tools/registry
(cd hack/tools/registry && go vet ./...)

log "go vet -tags $tags"
go vet -tags "$tags" ./...
if [ -n "$racepkgs" ]; then
	log "go vet -tags $tags,race"
	go vet -tags "$tags,race" $racepkgs
fi

staticcheck=$("$REPO_ROOT/hack/ensure-staticcheck.sh")
log "staticcheck -tags $tags"
"$staticcheck" -tags "$tags" ./...
if [ -n "$racepkgs" ]; then
	log "staticcheck -tags $tags,race"
	"$staticcheck" -tags "$tags,race" $racepkgs
fi
# The diagnose CLI and the test helpers build off Linux too (a laptop's go test skips what needs Linux).
log "GOOS=darwin go build"
GOOS=darwin go build ./...
log "lint passed"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The apiserver test tier: installs etcd and the cached kube-apiserver, then runs every test
# tagged `apiserver` against them (internal/apiservertest starts one pair per test).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR
mapfile -t pkgs < <(grep -rl --include='*_test.go' -E '^//go:build .*\bapiserver\b' . | xargs -r -n1 dirname | sort -u)
[ ${#pkgs[@]} -gt 0 ] || die "no apiserver-tagged tests found"
log "apiserver tier: ${pkgs[*]}"
go test -race -count=1 -tags apiserver "${pkgs[@]}" "$@"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Agent figures against a real kube-apiserver: drift-to-condition latency (inotify and uevent
# paths), idle RSS/CPU with 1,000 LoadBalancer Services cached, API writes at steady state.
# Needs root (synthetic kernel uevents). Options are passed to hack/benchagent (e.g. -trials 20).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR
make -s build
go run ./hack/benchagent -binary bin/ipvs-guard "$@"

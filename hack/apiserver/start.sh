#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Starts a real etcd + kube-apiserver on 127.0.0.1 free ports in the background and prints the
# path of an admin kubeconfig (token in system:masters). Stop it with hack/apiserver/stop.sh DIR.
#
# Usage: hack/apiserver/start.sh [DIR]    (default: a new temporary directory)
#   KUBECONFIG=$(hack/apiserver/start.sh /tmp/api) && kubectl --kubeconfig "$KUBECONFIG" get ns
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

dir=${1:-$(mktemp -d /tmp/ipvs-guard-apiserver.XXXXXX)}
mkdir -p "$dir"
"$REPO_ROOT/hack/apiserver/install.sh" etcd kube-apiserver
(cd "$REPO_ROOT" && go build -o "$dir/serve" ./hack/apiserver/serve)
rm -f "$dir/ready"
nohup "$dir/serve" -dir "$dir" >"$dir/serve.log" 2>&1 &
echo $! >"$dir/serve.pid"
for _ in $(seq 1 600); do
	[ -f "$dir/ready" ] && { echo "$dir/kubeconfig"; exit 0; }
	kill -0 "$(cat "$dir/serve.pid")" 2>/dev/null || { cat "$dir/serve.log" >&2; die "API server failed to start (logs in $dir)"; }
	sleep 0.2
done
die "API server not ready after 120 s (logs in $dir)"

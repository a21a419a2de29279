#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Stops what hack/apiserver/start.sh DIR started.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
dir=${1:?usage: hack/apiserver/stop.sh DIR}
[ -f "$dir/serve.pid" ] || exit 0
pid=$(cat "$dir/serve.pid")
kill "$pid" 2>/dev/null || true
for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null || true
rm -f "$dir/serve.pid" "$dir/ready"

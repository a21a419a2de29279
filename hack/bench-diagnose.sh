#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Wall time and peak RSS of `ipvs-guard diagnose --root <tree>` over the
# captured host trees (targets: < 50 ms, < 30 MiB), measured by
# hack/benchdiagnose. Builds bin/ipvs-guard.
# Usage: hack/bench-diagnose.sh [runs per tree, default 20] [benchdiagnose flags, e.g. -baseline OLD_BINARY]
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
runs=${1:-20}
make -s build
go run ./hack/benchdiagnose -binary bin/ipvs-guard -runs "$runs" "${@:2}"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches prometheus-operator's ServiceMonitor and PrometheusRule CRDs from its
# Go module (module proxy) into $CACHE_DIR/prometheus-operator-crds/<version>/
# once, and prints that directory. The chart tier applies them to the test API
# server before dry-running the chart's ServiceMonitor and PrometheusRule.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

version=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
dir=$CACHE_DIR/prometheus-operator-crds/$version
crds=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml)
have=1
for f in "${crds[@]}"; do [ -s "$dir/$f" ] || have=0; done
if [ $have = 0 ]; then
	log "downloading github.com/prometheus-operator/prometheus-operator@$version for its CRDs"
	src=$(cd "$REPO_ROOT" && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$version" |
		awk -F'"' '$2 == "Dir" {print $4}')
	[ -d "$src/example/prometheus-operator-crd" ] || die "no example/prometheus-operator-crd in $src"
	mkdir -p "$dir"
	for f in "${crds[@]}"; do
		cp "$src/example/prometheus-operator-crd/$f" "$dir/$f.tmp"
		chmod 0644 "$dir/$f.tmp"
		mv "$dir/$f.tmp" "$dir/$f"
	done
fi
echo "$dir"

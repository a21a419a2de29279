#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tier `rules`: the shipped alert rules (deploy/ipvs-guard/files/alerts.yaml)
# through `promtool check rules` and `promtool test rules`, and a real scrape of
# the metrics endpoint through `promtool check metrics`.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

apt_ensure prometheus
command -v promtool >/dev/null || die "promtool not found after installing Debian's prometheus"
log "promtool: $(promtool --version 2>&1 | head -1)"

rules=deploy/ipvs-guard/files/alerts.yaml
promtool check rules "$rules"
(cd deploy/tests && promtool test rules alerts_test.yaml)

# Real scrapes: the collector and activity metrics served over HTTP, and a
# running `ipvs-guard run` against a real kube-apiserver (its RSS is logged).
hack/apiserver/install.sh etcd kube-apiserver
go test -tags promtool -count=1 -v -run 'Promtool|RunningAgentScrape' ./pkg/metrics

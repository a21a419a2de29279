# SPDX-License-Identifier: Apache-2.0

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO ?= go
BIN := bin/ipvs-guard
# The release version: VERSION, which the chart's version and appVersion and the image tag
# carry too (deploy/version_test.go checks they agree; hack/release.sh publishes it).
VERSION ?= $(shell cat VERSION)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VPKG := github.com/ipvs-guard/ipvs-guard/pkg/version
LDFLAGS := -s -w -X $(VPKG).Version=$(VERSION) -X $(VPKG).Commit=$(COMMIT) -X $(VPKG).BuildDate=$(BUILD_DATE)
export IPVS_GUARD_CACHE ?= $(CURDIR)/.cache

.PHONY: all
all: build

## build: static binary in bin/
.PHONY: build
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ipvs-guard

## test: every tier, each named so a failure says where it broke (lint, unit, fuzz and netns run inside the fresh tier)
.PHONY: test
test: test-fresh test-guest test-apiserver test-nftables test-scale test-bench-smoke test-metallb test-migrate test-rules test-chart test-image test-e2e test-node
	@echo "all test tiers passed"

## test-fresh: the lint, unit, fuzz and netns tiers inside a pristine Debian 12 root (debootstrap, overlay, chroot): no tier leans on host state (root)
.PHONY: test-fresh
test-fresh:
	@echo "--- tier: fresh"
	hack/test-fresh.sh

## lint: gofmt, go vet and staticcheck (pinned in hack/tools/staticcheck) over every build tag, go mod tidy check
.PHONY: lint test-lint
lint test-lint:
	@echo "--- tier: lint"
	hack/test-lint.sh

## test-unit: unit tests with the race detector (fuzz seeds run here too)
.PHONY: test-unit
test-unit:
	@echo "--- tier: unit"
	hack/test-unit.sh

## test-fuzz: each fuzz target for a short budget (FUZZTIME=20000x; a duration such as 1m works too)
.PHONY: test-fuzz
test-fuzz:
	@echo "--- tier: fuzz"
	hack/fuzz.sh $${FUZZTIME:-20000x}

## test-apiserver: agent loop, conditions, events, RBAC and admission policy against a real kube-apiserver + etcd
.PHONY: test-apiserver
test-apiserver:
	@echo "--- tier: apiserver"
	hack/apiserver/test.sh

## test-scale: CI-sized cluster scale run: simulated nodes, Service churn, real agents; no Node write, RSS < 40 MiB at this size
.PHONY: test-scale
test-scale:
	@echo "--- tier: scale"
	hack/test-scale.sh

## test-bench-smoke: every bench the docs name, once with tiny parameters, so each keeps running on a fresh clone (root)
.PHONY: test-bench-smoke
test-bench-smoke:
	@echo "--- tier: bench-smoke"
	hack/bench-smoke.sh

## bench-scale: 1,000 simulated nodes, 5,000 LoadBalancer Services, churn, 20 real agents: writes, watch events/bytes, CPU, RSS per agent
.PHONY: bench-scale
bench-scale:
	hack/bench-scale.sh

## bench-scale-nftables: the same with the agents' kube-proxy in nftables mode (the real kube-proxy, its table read by every agent), in a private network namespace
.PHONY: bench-scale-nftables
bench-scale-nftables:
	hack/bench-scale.sh -proxy-mode nftables

## bench-agent: drift-to-condition latency, idle RSS/CPU with 1,000 LoadBalancer Services, API writes at steady state
.PHONY: bench-agent
bench-agent:
	hack/bench-agent.sh

## bench-diagnose: wall time and peak RSS of diagnose --root over the captured host trees
.PHONY: bench-diagnose
bench-diagnose:
	hack/bench-diagnose.sh $${RUNS:-20}

## bench-hostile: exit code, time, peak RSS and what was written for hostile and broken --root trees
.PHONY: bench-hostile
bench-hostile:
	hack/bench-hostile.sh

## bench-memory: peak RSS of diagnose --root (and --fix) with each parsed host file at its size limit, and all at once, against the chart's 128 MiB
.PHONY: bench-memory
bench-memory:
	hack/bench-memory.sh

## test-guest: guest-tagged tests inside stock Debian kernels under QEMU: all on bookworm's 6.1; module loading, systemd-modules-load and IPVS also on bullseye's 5.10 and trixie's 6.12 (.ko.xz), each judged by its own release's systemd (hack/guest/README.md)
.PHONY: test-guest
test-guest:
	hack/guest/test.sh

## test-kernels: every guest-tagged test on every pinned Debian kernel (hack/guest/kernels/)
.PHONY: test-kernels
test-kernels:
	@echo "--- tier: kernels"
	hack/guest/test.sh --all-packages

## bench-guest: module loading in the guest kernel, ipvs-guard vs kmod modprobe (ratio)
.PHONY: bench-guest
bench-guest:
	hack/guest/bench.sh

## demo: the main job in a few minutes: in a Debian kernel under QEMU diagnose finds the missing IPVS modules, --fix repairs them and systemd-modules-load keeps them; then the agent on a node of a real kube-apiserver: report-only it raises IPVSModulesMissing with an Event, remediating it loads and declares the module
.PHONY: demo
demo:
	@hack/guest/demo.sh
	@hack/e2e/run.sh --demo

## demo-full: the whole tour: the guest kernel's diagnose and --fix; the agent's whole timeline next to a real kube-apiserver and kube-proxy; helm install on a real Debian node (kubelet + containerd), the pod's remediation and a reboot; then an ARP conflict on a MetalLB segment, named
.PHONY: demo-full
demo-full:
	@hack/guest/demo.sh
	@hack/e2e/run.sh --demo-full
	@hack/test-node.sh --demo
	@hack/metallb/test.sh --demo

## test-e2e (or e2e): real kube-apiserver on the host, real kube-proxy (IPVS) and `ipvs-guard run` in the guest kernel
.PHONY: e2e test-e2e
e2e test-e2e:
	@echo "--- tier: e2e"
	hack/e2e/run.sh

## test-node: helm install into a real control plane (kube-apiserver, kube-controller-manager, kube-scheduler); a stock Debian 12 node (systemd) under QEMU: diagnose --fix, real reboot; the chart's pod under the kubelet + containerd 2.x on that node
.PHONY: test-node
test-node:
	@echo "--- tier: node"
	hack/test-node.sh

## guest-shell: an interactive shell in the guest kernel with ipvs-guard (Ctrl-a x quits)
.PHONY: guest-shell
guest-shell:
	hack/guest/shell.sh

## test-metallb: real MetalLB v0.16.2 on an L2 segment of netns nodes with agents; Prometheus → Alertmanager → webhook (root)
.PHONY: test-metallb
test-metallb:
	@echo "--- tier: metallb"
	hack/metallb/test.sh

## test-migrate: one node from kube-proxy IPVS mode to nftables mode and back, for real: the guest's kube-proxy v1.37.1, MetalLB's speaker and agent on a segment; switch → conditions, → ClusterIP, → LoadBalancer IP timed; one ARP responder throughout (root)
.PHONY: test-migrate
test-migrate:
	@echo "--- tier: migrate"
	hack/migrate/test.sh

## bench-metallb: ARP RTT to MetalLB's user-space responder over 100 probes, ipvs-guard vs arping (median ratio)
.PHONY: bench-metallb
bench-metallb:
	hack/metallb/test.sh --bench

## test-netns: ARP/NDP prober against real network namespaces, iputils arping and ndisc6 (root)
.PHONY: test-netns
test-netns:
	@echo "--- tier: netns"
	hack/test-netns.sh

## test-nftables: the real kube-proxy v1.37.1 in nftables mode in a network namespace on this kernel, with a real API server: kube-proxy-sync and nftables-dataplane against faults made for real, compared with nft -j (root)
.PHONY: test-nftables
test-nftables:
	@echo "--- tier: nftables"
	hack/test-nftables.sh

## bench-ipvs: 10,000 virtual servers x 2 real servers in the guest kernel, ipvs-guard vs ipvsadm -Ln (ratio, peak RSS)
.PHONY: bench-ipvs
bench-ipvs:
	hack/bench-ipvs.sh

## bench-arp: ARP and NDP figures (1,000 IPs vs arping, RTT vs arping and ndisc6, sharding rate)
.PHONY: bench-arp
bench-arp:
	hack/bench-arp.sh

## test-rules: promtool check/test of the shipped alert rules, promtool check metrics on a real scrape
.PHONY: test-rules
test-rules:
	@echo "--- tier: rules"
	hack/test-rules.sh

## test-chart: helm lint/template assertions, schema rejections, dry-run apply on a real kube-apiserver
.PHONY: test-chart
test-chart:
	@echo "--- tier: chart"
	hack/test-chart.sh

## test-image: build the Dockerfile with buildah (offline, local builder image) and run `ipvs-guard version` in it
.PHONY: test-image
test-image:
	@echo "--- tier: image"
	hack/image/build.sh

## image: build the container image with buildah as ghcr.io/ipvs-guard/ipvs-guard:$(VERSION) (the chart's default) and write it to _output/ as a docker-archive tarball for air-gapped nodes (RKE2: copy it to /var/lib/rancher/rke2/agent/images/)
.PHONY: image
image:
	VERSION=$(VERSION) IMAGE=ghcr.io/ipvs-guard/ipvs-guard:$(VERSION) \
		IMAGE_ARCHIVE=_output/ipvs-guard-$(VERSION)-linux-$$($(GO) env GOARCH).tar hack/image/build.sh

## release: build the multi-arch image and the chart for VERSION and push both to REGISTRY (default ghcr.io/ipvs-guard; hack/release.sh, run by .github/workflows/release.yaml on a tag)
.PHONY: release
release:
	hack/release.sh

## manifests: render the chart's defaults into deploy/manifests/ipvs-guard.yaml
.PHONY: manifests
manifests:
	hack/render-manifests.sh

## helm-lint: helm lint --strict the chart (helm pinned in hack/tools/helm, built into the cache)
.PHONY: helm-lint
helm-lint:
	$$(hack/ensure-helm.sh) lint --strict deploy/ipvs-guard

## chart-docs: regenerate deploy/ipvs-guard/README.md from values.yaml
.PHONY: chart-docs
chart-docs:
	$(GO) run ./hack/chartdoc -o deploy/ipvs-guard/README.md deploy/ipvs-guard

.PHONY: clean
clean:
	rm -rf bin

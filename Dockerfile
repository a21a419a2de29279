# SPDX-License-Identifier: Apache-2.0
# ipvs-guard: one static binary on a distroless runtime.
#
#   docker build -t ipvs-guard --build-arg VERSION=$(git describe --tags --always) .
#
# BUILDER_IMAGE must provide Go (go.mod's version) and a shell; RUNTIME_IMAGE
# needs nothing (the binary is static, CGO_ENABLED=0): distroless/static for
# real use, scratch works too. hack/image/build.sh builds this same file
# offline with buildah.
#
# Users: the image runs as 65532 (nonroot) so `ipvs-guard diagnose` or
# `version` started by hand is unprivileged. The DaemonSet runs it as uid 0
# with every capability dropped but NET_ADMIN, NET_RAW and (remediation only)
# SYS_MODULE: Kubernetes can hand added capabilities to a non-root process only
# through file capabilities, and allowPrivilegeEscalation=false (no_new_privs)
# turns those off. So root-with-a-minimal-bounding-set is the least privilege
# that works; the chart never sets privileged.
ARG BUILDER_IMAGE=docker.io/library/golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${BUILDER_IMAGE} AS builder
ARG TARGETOS=linux
ARG TARGETARCH
# GOPROXY may point at a file:// proxy bind-mounted into the build (offline builds).
ARG GOPROXY=https://proxy.golang.org,direct
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
ENV CGO_ENABLED=0 GOFLAGS=-trimpath GOPROXY=${GOPROXY}
WORKDIR /src
COPY go.mod go.sum ./
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
RUN --mount=type=cache,target=/root/.cache/go-build,id=ipvs-guard-go-build \
    --mount=type=cache,target=/root/go/pkg/mod,id=ipvs-guard-go-mod \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH:-$(go env GOARCH)} go build \
      -ldflags "-s -w \
        -X github.com/ipvs-guard/ipvs-guard/pkg/version.Version=${VERSION} \
        -X github.com/ipvs-guard/ipvs-guard/pkg/version.Commit=${COMMIT} \
        -X github.com/ipvs-guard/ipvs-guard/pkg/version.BuildDate=${BUILD_DATE}" \
      -o /out/ipvs-guard ./cmd/ipvs-guard

FROM ${RUNTIME_IMAGE}
ARG VERSION=dev
ARG COMMIT=unknown
ARG BUILD_DATE=unknown
LABEL org.opencontainers.image.title="ipvs-guard" \
      org.opencontainers.image.description="Node agent keeping kube-proxy's IPVS prerequisites true and proving MetalLB LoadBalancer IPs answer ARP" \
      org.opencontainers.image.source="https://github.com/ipvs-guard/ipvs-guard" \
      org.opencontainers.image.url="https://github.com/ipvs-guard/ipvs-guard" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}"
COPY --from=builder /out/ipvs-guard /usr/local/bin/ipvs-guard
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ipvs-guard"]
CMD ["run"]

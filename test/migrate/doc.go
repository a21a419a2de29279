// SPDX-License-Identifier: Apache-2.0

// Package migrate is the migration test tier (build tag migrate, run by
// hack/migrate/test.sh): the QEMU guest (Debian's kernel) runs the real
// kube-proxy v1.37.1 in IPVS mode, the real MetalLB v0.16.2 speaker and an
// `ipvs-guard run` agent, on a layer-2 segment shared with a network
// namespace node whose agent probes the LoadBalancer IP; kube-proxy is
// switched to nftables mode and back while the test measures when the
// Service VIP, the LoadBalancer IP and the Node's conditions follow. See
// hack/migrate/README.md.
package migrate

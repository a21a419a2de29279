// SPDX-License-Identifier: Apache-2.0

// Package metallbtest runs the real MetalLB v0.16.2 (controller and
// speakers, built by hack/metallb/install.sh into $IPVS_GUARD_CACHE) against
// a real API server, for tests, the demo and benchmarks: it installs
// MetalLB's own CRDs, an IPAddressPool and an L2Advertisement, starts the
// controller on the host and one speaker per l2segment node, inside the
// node's network namespace with only CAP_NET_RAW (as MetalLB's chart runs
// it). Each speaker gets a Pod object carrying the node's IP, because
// MetalLB's speakers find each other for memberlist (fast dead-node
// detection, which drives failover) by listing their Pods.
package metallbtest

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Version is the MetalLB release the tier runs.
const Version = "v0.16.2"

// Namespace is where MetalLB's objects live.
const Namespace = "metallb-system"

// SpeakerLabels select the speakers' Pods (memberlist discovery).
const SpeakerLabels = "app=metallb,component=speaker"

// Paths are the installed MetalLB artifacts.
type Paths struct {
	// Controller and Speaker are the binaries.
	Controller, Speaker string
	// CRDs is the directory of MetalLB's CRD manifests (config/crd/bases).
	CRDs string
}

// DefaultPaths returns where hack/metallb/install.sh puts the artifacts
// under $IPVS_GUARD_CACHE (else the repository's .cache).
func DefaultPaths(repoRoot string) Paths {
	dir := filepath.Join(cmp.Or(os.Getenv("IPVS_GUARD_CACHE"), filepath.Join(repoRoot, ".cache")), "metallb", Version)
	return Paths{
		Controller: filepath.Join(dir, "controller"),
		Speaker:    filepath.Join(dir, "speaker"),
		CRDs:       filepath.Join(dir, "crds"),
	}
}

// Check reports what is missing from p.
func (p Paths) Check() error {
	var errs []error
	for _, f := range []string{p.Controller, p.Speaker, filepath.Join(p.CRDs, "metallb.io_servicel2statuses.yaml")} {
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("MetalLB %s not installed (run hack/metallb/install.sh): %w", Version, errors.Join(errs...))
	}
	return nil
}

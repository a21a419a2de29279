// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package nftready

import (
	"errors"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// HostSources returns the readers of the node at root; off Linux only the
// kernel release.
func HostSources(root hostfs.Root) Host { return Host{KernelRelease: root.KernelRelease} }

// HostIPSets lists ipsets; it needs Linux.
func HostIPSets() ([]string, error) { return nil, errors.New("ipsets need Linux") }

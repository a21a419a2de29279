// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package nftready

import (
	"context"
	"errors"
)

// NetNSProber is the real Prober; it needs Linux.
type NetNSProber struct{}

// Probe implements Prober.
func (NetNSProber) Probe(context.Context) ([]ProbeResult, error) {
	return nil, errors.New("the nf_tables probe needs Linux")
}

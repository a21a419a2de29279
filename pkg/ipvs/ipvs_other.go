// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package ipvs

import (
	"context"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Option configures a Handle.
type Option func(*Handle)

// WithNetNS is accepted for portability and ignored.
func WithNetNS(string) Option { return func(*Handle) {} }

// Handle is a stub on platforms without IPVS.
type Handle struct{}

var _ Interface = (*Handle)(nil)

// New returns a stub Handle.
func New(hostfs.Root, ...Option) *Handle { return &Handle{} }

// Close does nothing.
func (*Handle) Close() {}

// Table returns ErrNotSupported.
func (*Handle) Table(context.Context) (Table, error) { return nil, ErrNotSupported }

// withoutProcFS is accepted for portability and ignored.
func withoutProcFS() Option { return func(*Handle) {} }

// Timeouts returns ErrNotSupported.
func (*Handle) Timeouts(context.Context) (Timeouts, error) { return Timeouts{}, ErrNotSupported }

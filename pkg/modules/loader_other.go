// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package modules

// sysKernel reports ErrNotSupported: only Linux loads modules.
type sysKernel struct{}

// FinitModule returns ErrNotSupported.
func (sysKernel) FinitModule(int, string, int) error { return ErrNotSupported }

// InitModule returns ErrNotSupported.
func (sysKernel) InitModule([]byte, string) error { return ErrNotSupported }

func runningRelease() (string, error) { return "", ErrNotSupported }

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package modules

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// sysKernel performs the real module syscalls.
type sysKernel struct{}

// FinitModule calls finit_module(2).
func (sysKernel) FinitModule(fd int, params string, flags int) error {
	return unix.FinitModule(fd, params, flags)
}

// InitModule calls init_module(2).
func (sysKernel) InitModule(image []byte, params string) error {
	return unix.InitModule(image, params)
}

// runningRelease returns uname -r of the running kernel.
func runningRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

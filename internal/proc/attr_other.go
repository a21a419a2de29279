// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package proc

import "syscall"

// Attr returns the process attributes of a test component: in its own
// process group when group is true. Only Linux also kills it with the test
// process.
func Attr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}

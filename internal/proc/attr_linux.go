// SPDX-License-Identifier: Apache-2.0

package proc

import "syscall"

// Attr returns the process attributes of a test component: killed with the
// test process should that die first, and in its own process group when
// group is true.
func Attr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}

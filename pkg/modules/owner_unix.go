// SPDX-License-Identifier: Apache-2.0

//go:build unix

package modules

import (
	"os"
	"syscall"
)

// fileOwner returns the uid and gid of fi, when the platform says.
func fileOwner(fi os.FileInfo) *[2]int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return &[2]int{int(st.Uid), int(st.Gid)}
	}
	return nil
}

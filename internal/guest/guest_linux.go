// SPDX-License-Identifier: Apache-2.0

//go:build linux

package guest

import "golang.org/x/sys/unix"

func deleteModule(name string) error {
	return unix.DeleteModule(name, unix.O_NONBLOCK)
}

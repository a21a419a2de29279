// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package guest

import "errors"

func deleteModule(string) error {
	return errors.New("unloading kernel modules is only supported on Linux")
}

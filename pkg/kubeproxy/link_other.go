// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package kubeproxy

import "errors"

// ReadLink is not supported on this platform.
func ReadLink(name string) (Link, error) {
	return Link{Name: name}, errors.New("reading interfaces is only supported on Linux")
}

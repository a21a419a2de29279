// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package kubeproxy

import "errors"

func hasNFTablesTable(string) (bool, error) {
	return false, errors.New("nftables: only on Linux")
}

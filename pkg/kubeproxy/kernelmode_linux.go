// SPDX-License-Identifier: Apache-2.0

//go:build linux

package kubeproxy

import (
	"fmt"

	"github.com/google/nftables"
)

// hasNFTablesTable reports whether an ip or ip6 nftables table of that name
// exists in this network namespace (one netlink dump of the tables).
func hasNFTablesTable(name string) (bool, error) {
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("opening nftables netlink: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyUnspecified)
	if err != nil {
		return false, fmt.Errorf("listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == name && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) {
			return true, nil
		}
	}
	return false, nil
}

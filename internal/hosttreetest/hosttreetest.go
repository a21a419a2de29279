// SPDX-License-Identifier: Apache-2.0

// Package hosttreetest turns a captured host tree (testdata/hosts/…, the
// bench's copies) into an nftables node's for tests and benchmarks.
package hosttreetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/nftready"
)

// ShipNFTables adds the modules kube-proxy's nftables rules need
// (nftready.NeededModules) to the tree's modules.dep, as a kernel that
// ships them has them; with loaded, to its /proc/modules too.
func ShipNFTables(root string, loaded bool) error {
	deps, err := filepath.Glob(filepath.Join(root, "lib", "modules", "*", "modules.dep"))
	if err != nil || len(deps) == 0 {
		return fmt.Errorf("no modules.dep under %s: %v", root, err)
	}
	for _, dep := range deps {
		b, err := os.ReadFile(dep)
		if err != nil {
			return err
		}
		var add strings.Builder
		for _, m := range nftready.NeededModules() {
			if !strings.Contains(string(b), "/"+m+".ko:") {
				fmt.Fprintf(&add, "kernel/net/netfilter/%s.ko:\n", m)
			}
		}
		if err := os.WriteFile(dep, append(b, add.String()...), 0o644); err != nil {
			return err
		}
	}
	if !loaded {
		return nil
	}
	pm := filepath.Join(root, "proc", "modules")
	b, err := os.ReadFile(pm)
	if err != nil {
		return err
	}
	proc := string(b)
	for _, m := range nftready.NeededModules() {
		if !strings.Contains(proc, "\n"+m+" ") && !strings.HasPrefix(proc, m+" ") {
			proc += m + " 204800 0 - Live 0x0000000000000000\n"
		}
	}
	return os.WriteFile(pm, []byte(proc), 0o644)
}

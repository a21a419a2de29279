// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// limitProcModules bounds /proc/modules (a few KiB on a real node).
var limitProcModules = hostfs.Limit{Kind: "/proc/modules", Max: 1 << 20}

// ModuleLoaded reports whether the ip_vs module is loaded (or built in) on
// the host at root: /sys/module/ip_vs exists (it does for a loaded module and
// for a built-in one, which has parameters), or /proc/modules lists ip_vs as
// Live. It only reads files, so it can never load anything.
func ModuleLoaded(root hostfs.Root) (bool, error) {
	if _, err := root.Stat("/sys/module/ip_vs"); err == nil {
		return true, nil
	}
	b, err := root.ReadFile("/proc/modules", limitProcModules)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("reading loaded modules: %w", err)
	}
	return procModulesHasLive(b, "ip_vs"), nil
}

// procModulesHasLive reports whether /proc/modules content lists module in
// state Live ("name size refcount deps state address").
func procModulesHasLive(b []byte, module string) bool {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 5 && string(f[0]) == module {
			return string(f[4]) == "Live"
		}
		if len(f) >= 1 && len(f) < 5 && string(f[0]) == module {
			return true
		}
	}
	return false
}

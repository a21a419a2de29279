// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"bufio"
	"path"
	"slices"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// sysctlDirs are the directories systemd-sysctl reads, in its order
// (sysctl.d(5)); a file name in an earlier one masks the same name in the
// later ones.
var sysctlDirs = []string{"/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d"}

// limitSysctlFile bounds one sysctl.d file.
var limitSysctlFile = hostfs.Limit{Kind: "a sysctl.d file", Max: 256 << 10}

// modulesDisabledFiles returns the sysctl.d files (and /etc/sysctl.conf)
// under root that set kernel.modules_disabled to 1, in the order
// systemd-sysctl applies them. What cannot be read is left out: the files
// only word the fix.
func modulesDisabledFiles(root hostfs.Root) []string {
	seen := map[string]bool{}
	var names []string
	byName := map[string]string{}
	for _, dir := range sysctlDirs {
		ents, err := root.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if !strings.HasSuffix(n, ".conf") || seen[n] {
				continue
			}
			seen[n] = true
			names = append(names, n)
			byName[n] = path.Join(dir, n)
		}
	}
	slices.Sort(names)
	files := make([]string, 0, len(names)+1)
	for _, n := range names {
		files = append(files, byName[n])
	}
	files = append(files, "/etc/sysctl.conf")
	var out []string
	for _, f := range files {
		b, err := root.ReadFile(f, limitSysctlFile)
		if err == nil && setsModulesDisabled(string(b)) {
			out = append(out, f)
		}
	}
	return out
}

// setsModulesDisabled reports whether sysctl.d content sets
// kernel.modules_disabled (or kernel/modules_disabled) to 1.
func setsModulesDisabled(content string) bool {
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key = strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(key), "-"), "/", ".")
		if key == "kernel.modules_disabled" && strings.TrimSpace(val) == "1" {
			return true
		}
	}
	return false
}

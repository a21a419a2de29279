// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// DepEntry is one line of modules.dep: a module file and the files it
// depends on, both relative to /lib/modules/<release>.
type DepEntry struct {
	// Name is the module name (file base name without .ko*, normalised).
	Name string
	// Path is the module file, e.g. kernel/net/netfilter/ipvs/ip_vs.ko(.xz).
	Path string
	// Deps are the files it needs, in modules.dep order (load them last to first).
	Deps []string
}

// moduleSuffixes are the module file suffixes depmod writes, longest first.
var moduleSuffixes = []string{".ko.zst", ".ko.xz", ".ko.gz", ".ko"}

// ModuleNameFromPath returns the module name of a module file path
// ("kernel/arch/x86/crypto/crc32c-intel.ko.xz" → "crc32c_intel"), or "" when
// the path does not name a module file.
func ModuleNameFromPath(p string) string {
	base := path.Base(p)
	for _, s := range moduleSuffixes {
		if strings.HasSuffix(base, s) && len(base) > len(s) {
			return Normalize(strings.TrimSuffix(base, s))
		}
	}
	return ""
}

// ParseModulesDep parses modules.dep ("path: dep dep …" per line) into
// entries keyed by module name. A line without a colon or naming something
// that is not a module file (a truncated file, for instance) is an error
// naming the line.
func ParseModulesDep(r io.Reader) (map[string]DepEntry, error) {
	out := make(map[string]DepEntry)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		file, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: no ':' after the module path in %q (truncated file?)", n, line)
		}
		file = strings.TrimSpace(file)
		name := ModuleNameFromPath(file)
		if name == "" || !validModuleName(name) {
			return nil, fmt.Errorf("line %d: %q is not a module file", n, file)
		}
		e := DepEntry{Name: name, Path: file}
		for _, d := range strings.Fields(rest) {
			if ModuleNameFromPath(d) == "" {
				return nil, fmt.Errorf("line %d: dependency %q of %s is not a module file", n, d, name)
			}
			e.Deps = append(e.Deps, d)
		}
		if _, dup := out[name]; !dup { // kmod keeps the first entry
			out[name] = e
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return out, nil
}

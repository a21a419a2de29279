// SPDX-License-Identifier: Apache-2.0

package modules

import (
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
// naming the line. It reads the whole file at once and slices it, so a
// 4,000-module index costs one allocation per module.
func ParseModulesDep(r io.Reader) (map[string]DepEntry, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	data := string(b)
	out := make(map[string]DepEntry, strings.Count(data, "\n")+1)
	n := 0
	for len(data) > 0 {
		n++
		line := data
		if i := strings.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = ""
		}
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
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
		count := 0
		for tok := range strings.FieldsSeq(rest) {
			if !hasModuleSuffix(tok) {
				return nil, fmt.Errorf("line %d: dependency %q of %s is not a module file", n, tok, name)
			}
			count++
		}
		if _, dup := out[name]; dup { // kmod keeps the first entry
			continue
		}
		e := DepEntry{Name: name, Path: file}
		if count > 0 {
			e.Deps = make([]string, 0, count)
			for tok := range strings.FieldsSeq(rest) {
				e.Deps = append(e.Deps, tok)
			}
		}
		out[name] = e
	}
	return out, nil
}

// hasModuleSuffix reports whether p ends like a module file (cheaper than
// ModuleNameFromPath for validating dependency lists).
func hasModuleSuffix(p string) bool {
	for _, s := range moduleSuffixes {
		if len(p) > len(s) && strings.HasSuffix(p, s) && p[len(p)-len(s)-1] != '/' {
			return true
		}
	}
	return false
}

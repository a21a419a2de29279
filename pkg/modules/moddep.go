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
// naming the line.
func ParseModulesDep(r io.Reader) (map[string]DepEntry, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	lines, err := indexModulesDep(string(b))
	if err != nil {
		return nil, err
	}
	out := make(map[string]DepEntry, len(lines))
	for name, line := range lines {
		e, err := parseDepLine(name, line)
		if err != nil {
			return nil, err
		}
		out[name] = e
	}
	return out, nil
}

// indexModulesDep maps each module name to its modules.dep line without
// splitting the dependency lists (the expensive part, done per module on
// demand by parseDepLine). Every line must name a module file before a
// colon; the last line's dependencies are checked too, as a truncated file
// ends in a cut line. Keys and values are substrings of data.
func indexModulesDep(data string) (map[string]string, error) {
	out := make(map[string]string, strings.Count(data, "\n")+1)
	n := 0
	var last, lastName string
	lastN := 0
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
		colon := strings.IndexByte(line, ':')
		if colon < 0 {
			return nil, fmt.Errorf("line %d: no ':' after the module path in %q (truncated file?)", n, line)
		}
		file := strings.TrimSpace(line[:colon])
		name := ModuleNameFromPath(file)
		if name == "" || !validModuleName(name) {
			return nil, fmt.Errorf("line %d: %q is not a module file", n, file)
		}
		if _, dup := out[name]; !dup { // kmod keeps the first entry
			out[name] = line
		}
		last, lastName, lastN = line, name, n
	}
	if last != "" {
		if _, err := parseDepLine(lastName, last); err != nil {
			return nil, fmt.Errorf("line %d: %w (truncated file?)", lastN, err)
		}
	}
	return out, nil
}

// parseDepLine splits one modules.dep line of module name.
func parseDepLine(name, line string) (DepEntry, error) {
	file, rest, _ := strings.Cut(line, ":")
	e := DepEntry{Name: name, Path: strings.TrimSpace(file)}
	count := 0
	for tok := range strings.FieldsSeq(rest) {
		if !hasModuleSuffix(tok) {
			return DepEntry{}, fmt.Errorf("dependency %q of %s is not a module file", tok, name)
		}
		count++
	}
	if count > 0 {
		e.Deps = make([]string, 0, count)
		for tok := range strings.FieldsSeq(rest) {
			e.Deps = append(e.Deps, tok)
		}
	}
	return e, nil
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

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"sort"
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
// demand by parseDepLine). Keys and values are substrings of data. See
// scanModulesDep for what is checked.
func indexModulesDep(data string) (map[string]string, error) {
	out := make(map[string]string, strings.Count(data, "\n")+1)
	err := scanModulesDep(data, func(name, line string, _ int) {
		if _, dup := out[name]; !dup { // kmod keeps the first entry
			out[name] = line
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanModulesDep hands each entry of modules.dep content to fn: the module
// name, its line (trimmed) and the line's offset in data. Every line must
// name a module file before a colon; the last line's dependencies are
// checked too, as a truncated file ends in a cut line.
func scanModulesDep(data string, fn func(name, line string, off int)) error {
	n := 0
	var last, lastName string
	lastN := 0
	for off := 0; off < len(data); {
		n++
		line := data[off:]
		start := off
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
			off += i + 1
		} else {
			off = len(data)
		}
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		colon := strings.IndexByte(line, ':')
		if colon < 0 {
			return fmt.Errorf("line %d: no ':' after the module path in %q (truncated file?)", n, line)
		}
		file := strings.TrimSpace(line[:colon])
		name := ModuleNameFromPath(file)
		if name == "" || !validModuleName(name) {
			return fmt.Errorf("line %d: %q is not a module file", n, file)
		}
		fn(name, line, start)
		last, lastName, lastN = line, name, n
	}
	if last != "" {
		if _, err := parseDepLine(lastName, last); err != nil {
			return fmt.Errorf("line %d: %w (truncated file?)", lastN, err)
		}
	}
	return nil
}

// depIndex finds the modules.dep line of a module without a map entry per
// module: it keeps the file's content and the offsets of its lines sorted
// by module name, 4 bytes per module (a map of name to line costs about 60
// at 100,000 modules, which a file at its size limit holds).
type depIndex struct {
	data  string
	lines []uint32 // offsets of entry lines, by module name; one per name, the first in the file
}

// newDepIndex indexes modules.dep content (see scanModulesDep).
func newDepIndex(data string) (depIndex, error) {
	if int64(len(data)) > math.MaxUint32 {
		return depIndex{}, fmt.Errorf("%d bytes is too large to index", len(data))
	}
	type entry struct {
		name string
		off  uint32
	}
	var entries []entry
	err := scanModulesDep(data, func(name, _ string, off int) {
		entries = append(entries, entry{name, uint32(off)})
	})
	if err != nil {
		return depIndex{}, err
	}
	// Stable: of two lines of one module, the first in the file comes
	// first and is kept (as kmod does).
	slices.SortStableFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	d := depIndex{data: data, lines: make([]uint32, 0, len(entries))}
	for i, e := range entries {
		if i > 0 && entries[i-1].name == e.name {
			continue
		}
		d.lines = append(d.lines, e.off)
	}
	return d, nil
}

// len returns the number of modules.
func (d depIndex) len() int { return len(d.lines) }

// line returns the i-th entry's line, trimmed.
func (d depIndex) line(i int) string {
	l := d.data[d.lines[i]:]
	if j := strings.IndexByte(l, '\n'); j >= 0 {
		l = l[:j]
	}
	return strings.TrimSpace(l)
}

// name returns the i-th entry's module name.
func (d depIndex) name(i int) string {
	file, _, _ := strings.Cut(d.line(i), ":")
	return ModuleNameFromPath(strings.TrimSpace(file))
}

// lookup returns the line of module name (normalised).
func (d depIndex) lookup(name string) (string, bool) {
	i, found := sort.Find(len(d.lines), func(i int) int { return strings.Compare(name, d.name(i)) })
	if !found {
		return "", false
	}
	return d.line(i), true
}

// search returns the index of the first module whose name is not less
// than name.
func (d depIndex) search(name string) int {
	return sort.Search(len(d.lines), func(i int) bool { return d.name(i) >= name })
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

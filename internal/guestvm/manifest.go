// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"fmt"
	"os"
	"strings"
)

// Entry is one line of a guest manifest (hack/guest/README.md, "Adding
// binaries, files and kernel modules").
type Entry struct {
	// Kind is module, module-dir, bin, file, link or pkg.
	Kind string
	// Arg is the line's first argument: a module name, a directory under
	// /lib/modules/<version>, a host path, a link target or a package.
	Arg string
	// Dest is the optional second argument: the guest path (bin, file, link).
	Dest string
	// Source names the manifest and line, for errors.
	Source string
}

// Manifest is a guest manifest's entries in order.
type Manifest struct {
	// Name is the manifest's path (or a name for one built in code).
	Name string
	// Entries are its lines.
	Entries []Entry
	// Raw is the manifest's content, part of the base image's cache key.
	Raw string
}

// ParseManifest parses a manifest's text: one entry per line, `#` comments,
// blank lines ignored.
func ParseManifest(name, text string) (Manifest, error) {
	m := Manifest{Name: name, Raw: text}
	n := 0
	for line := range strings.Lines(text) {
		n++
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		e := Entry{Kind: f[0], Source: fmt.Sprintf("%s:%d", name, n)}
		switch e.Kind {
		case "module", "module-dir", "pkg":
			if len(f) != 2 {
				return m, fmt.Errorf("%s: %s takes one argument", e.Source, e.Kind)
			}
		case "bin", "file":
			if len(f) != 2 && len(f) != 3 {
				return m, fmt.Errorf("%s: %s takes a host path and an optional guest path", e.Source, e.Kind)
			}
		case "link":
			if len(f) != 3 {
				return m, fmt.Errorf("%s: link takes a target and a guest path", e.Source)
			}
		default:
			return m, fmt.Errorf("%s: unknown line kind %q", e.Source, e.Kind)
		}
		e.Arg = f[1]
		if len(f) == 3 {
			e.Dest = f[2]
		}
		m.Entries = append(m.Entries, e)
	}
	return m, nil
}

// ReadManifest reads and parses a manifest file.
func ReadManifest(path string) (Manifest, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest: %w", err)
	}
	return ParseManifest(path, string(raw))
}

// ExtraManifest is the manifest of one-off additions (GUEST_EXTRA_MODULES,
// GUEST_EXTRA_BINS): a module line per module, a bin line per binary.
func ExtraManifest(modules, bins []string) (Manifest, error) {
	var b strings.Builder
	for _, m := range modules {
		fmt.Fprintf(&b, "module %s\n", m)
	}
	for _, p := range bins {
		fmt.Fprintf(&b, "bin %s\n", p)
	}
	return ParseManifest("extra", b.String())
}

// Packages returns the Debian packages the manifests' pkg lines name, in
// order, without repeats.
func Packages(ms []Manifest) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range ms {
		for _, e := range m.Entries {
			if e.Kind == "pkg" && !seen[e.Arg] {
				seen[e.Arg] = true
				out = append(out, e.Arg)
			}
		}
	}
	return out
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"fmt"
	"io"
	"strings"
	"unicode"
)

// Alias maps a wildcard pattern (fnmatch syntax: * ? [...]) to a module.
type Alias struct {
	// Pattern is the alias pattern, normalised ('-' → '_' outside brackets).
	Pattern string
	// Module is the module the alias resolves to.
	Module string
	// File is the modprobe.d file the alias was read from (host path);
	// empty for depmod's modules.alias.
	File string
}

// Match reports whether name (normalised by the caller or not) matches the alias.
func (a Alias) Match(name string) bool {
	return fnmatch(a.Pattern, normalizeAlias(name))
}

// ParseModulesAlias parses depmod's modules.alias
// ("alias crc32c crc32c_intel" per line). Other commands in the file are an
// error: depmod writes only aliases.
func ParseModulesAlias(r io.Reader) ([]Alias, error) {
	c, err := ParseModprobeConfig(r)
	if err != nil {
		return nil, err
	}
	if len(c.Softdeps)+len(c.Options)+len(c.Blacklist)+len(c.Install) > 0 {
		return nil, fmt.Errorf("modules.alias holds commands other than alias")
	}
	return c.Aliases, nil
}

// resolveAlias returns every module an alias name resolves to, in file
// order, without duplicates.
func resolveAlias(aliases []Alias, name string) []string {
	var out []string
	n := normalizeAlias(name)
	for _, a := range aliases {
		if fnmatch(a.Pattern, n) && !contains(out, a.Module) {
			out = append(out, a.Module)
		}
	}
	return out
}

// scanAliases resolves name against the text of a modules.alias file
// without parsing all of it: only lines whose pattern's literal prefix can
// match name are split and matched. It gives the same answer as
// resolveAlias over ParseModulesAlias for depmod's output (which has no
// continuation lines) at a fraction of the cost; malformed lines are skipped.
func scanAliases(data, name string) []string {
	n := normalizeAlias(name)
	var out []string
	for len(data) > 0 {
		line := data
		if i := strings.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = ""
		}
		rest, ok := strings.CutPrefix(strings.TrimLeftFunc(line, unicode.IsSpace), "alias")
		if !ok || rest == "" || strings.IndexFunc(rest, unicode.IsSpace) != 0 {
			continue
		}
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		pat := rest
		if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
			pat = rest[:i]
		}
		if !literalPrefixMatches(pat, n) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		m := Normalize(f[1])
		if validModuleName(m) && fnmatch(normalizeAlias(f[0]), n) && !contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// literalPrefixMatches reports whether the part of pattern before its first
// wildcard can match the start of the normalised name n ('-' counts as '_').
func literalPrefixMatches(pattern, n string) bool {
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c == '*' || c == '?' || c == '[' {
			return true
		}
		if i >= len(n) {
			return false
		}
		if c == '-' {
			c = '_'
		}
		if c != n[i] {
			return false
		}
	}
	return len(pattern) == len(n)
}

// normalizeAlias replaces '-' with '_' outside bracket expressions, as kmod's
// alias_normalize does.
func normalizeAlias(s string) string {
	if !strings.Contains(s, "-") {
		return s
	}
	b := []byte(s)
	in := false
	for i, c := range b {
		switch {
		case c == '[':
			in = true
		case c == ']':
			in = false
		case c == '-' && !in:
			b[i] = '_'
		}
	}
	return string(b)
}

// fnmatch matches name against a shell wildcard pattern with *, ? and
// bracket expressions ([abc], [a-z], [!x] / [^x]), like fnmatch(3) with no
// flags ('*' also matches '/'). A malformed bracket matches literally.
func fnmatch(pattern, name string) bool {
	// Iterative matcher with single-star backtracking: linear in practice,
	// never exponential on hostile patterns.
	p, n := 0, 0
	starP, starN := -1, 0
	for n < len(name) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				starP, starN = p, n
				p++
				continue
			case '?':
				p++
				n++
				continue
			case '[':
				if ok, width, valid := matchBracket(pattern[p:], name[n]); valid {
					if ok {
						p += width
						n++
						continue
					}
				} else if name[n] == '[' {
					p++
					n++
					continue
				}
			default:
				if c == name[n] {
					p++
					n++
					continue
				}
			}
		}
		if starP >= 0 {
			starN++
			p, n = starP+1, starN
			continue
		}
		return false
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchBracket matches c against the bracket expression at the start of p.
// It returns whether c matches, the expression's width and whether the
// expression is well formed.
func matchBracket(p string, c byte) (match bool, width int, valid bool) {
	i := 1
	neg := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		neg = true
		i++
	}
	first := true
	for i < len(p) {
		if p[i] == ']' && !first {
			return match != neg, i + 1, true
		}
		first = false
		lo := p[i]
		hi := lo
		if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
			hi = p[i+2]
			i += 3
		} else {
			i++
		}
		if lo <= c && c <= hi {
			match = true
		}
	}
	return false, 0, false
}

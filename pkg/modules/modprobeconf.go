// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// ModprobeConfig is what kmod reads from modprobe.d and from depmod's text
// indexes (modules.alias and modules.softdep share the modprobe.d syntax).
// Install commands are kept, never run; remove commands are ignored.
type ModprobeConfig struct {
	// Aliases map wildcard patterns to module names, in file order.
	Aliases []Alias
	// Options are module parameters per module name (several lines are joined with spaces).
	Options map[string]string
	// Softdeps are soft dependencies per module name.
	Softdeps map[string]Softdep
	// Blacklist names blacklisted modules. kmod's modprobe skips them only
	// when they are reached through an alias; systemd-modules-load
	// (KMOD_PROBE_APPLY_BLACKLIST) skips them by name too.
	Blacklist map[string]bool
	// BlacklistFile is where each blacklist entry was read (a modprobe.d
	// file, or /proc/cmdline for modprobe.blacklist=); set by ReadModprobeDirs.
	BlacklistFile map[string]string
	// InstallFile is where each module's install command was read; set by
	// ReadModprobeDirs.
	InstallFile map[string]string
	// Install holds the install command per module. It is never run: a
	// module with one is not loaded (the administrator replaced its loading
	// with a command, often /bin/false to forbid it).
	Install map[string]string

	// optParts collects each module's options while files are parsed.
	optParts map[string][]string
	// file is the file being parsed.
	file string
}

func newModprobeConfig() *ModprobeConfig {
	return &ModprobeConfig{optParts: map[string][]string{}, Options: map[string]string{}, Softdeps: map[string]Softdep{}, Blacklist: map[string]bool{}, Install: map[string]string{},
		BlacklistFile: map[string]string{}, InstallFile: map[string]string{}}
}

// ParseModprobeConfig parses modprobe.d syntax: one command per line
// (backslash continues a line), '#' starts a comment line:
//
//	alias <wildcard> <module>
//	options <module> <param=value …>
//	softdep <module> pre: <m …> post: <m …>
//	blacklist <module>
//	install <module> <command …>   (kept, never run)
//	remove <module> <command …>    (ignored)
//
// Unknown commands are skipped as kmod skips them; a known command with too
// few arguments is an error naming the line.
func ParseModprobeConfig(r io.Reader) (*ModprobeConfig, error) {
	return parseModprobeConfig(r, false)
}

// parseModprobeConfig is ParseModprobeConfig; with lenient set a malformed
// line is skipped, as kmod skips it ("ignoring bad line"), instead of
// failing the whole file.
func parseModprobeConfig(r io.Reader, lenient bool) (*ModprobeConfig, error) {
	c := newModprobeConfig()
	if err := c.parseFrom(r, lenient, ""); err != nil {
		return nil, err
	}
	c.finish()
	return c, nil
}

// parseFrom parses r into c after what c holds (as kmod reads the files
// one after the other: the first install command and blacklist entry of a
// module win, aliases and soft dependencies add up, options are joined),
// recording file (when not "") as where each alias, blacklist entry and
// install command came from. finish completes c once every file is in.
func (c *ModprobeConfig) parseFrom(r io.Reader, lenient bool, file string) error {
	c.file = file
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	n, start := 0, 0
	var pending strings.Builder
	for sc.Scan() {
		n++
		raw := sc.Text()
		if pending.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(raw, "\\") {
			pending.WriteString(strings.TrimSuffix(raw, "\\"))
			pending.WriteByte(' ')
			continue
		}
		line := raw
		if pending.Len() > 0 {
			pending.WriteString(raw)
			line = pending.String()
			pending.Reset()
		}
		if err := c.parseLine(strings.TrimSpace(line)); err != nil && !lenient {
			return fmt.Errorf("line %d: %w", start, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	if pending.Len() > 0 {
		if err := c.parseLine(strings.TrimSpace(pending.String())); err != nil && !lenient {
			return fmt.Errorf("line %d: %w", start, err)
		}
	}
	return nil
}

// finish joins each module's options, once: appending to a growing string
// per line would copy it again and again.
func (c *ModprobeConfig) finish() {
	for name, parts := range c.optParts {
		c.Options[name] = strings.Join(parts, " ")
	}
	c.optParts, c.file = nil, ""
}

func (c *ModprobeConfig) parseLine(line string) error {
	if line == "" || strings.HasPrefix(line, "#") {
		return nil
	}
	f := strings.Fields(line)
	switch f[0] {
	case "alias":
		if len(f) < 3 {
			return fmt.Errorf("alias needs a pattern and a module: %q", line)
		}
		name := Normalize(f[2])
		if !validModuleName(name) {
			return fmt.Errorf("alias %s: invalid module name %q", f[1], f[2])
		}
		c.Aliases = append(c.Aliases, Alias{Pattern: normalizeAlias(f[1]), Module: name, File: c.file})
	case "options":
		if len(f) < 2 {
			return fmt.Errorf("options needs a module: %q", line)
		}
		name := Normalize(f[1])
		if len(f) > 2 {
			c.optParts[name] = append(c.optParts[name], f[2:]...) // joined by finish
		}
	case "blacklist":
		if len(f) < 2 {
			return fmt.Errorf("blacklist needs a module: %q", line)
		}
		name := Normalize(f[1])
		if !c.Blacklist[name] && c.file != "" {
			c.BlacklistFile[name] = c.file
		}
		c.Blacklist[name] = true
	case "install":
		if len(f) < 3 {
			return fmt.Errorf("install needs a module and a command: %q", line)
		}
		name := Normalize(f[1])
		if _, ok := c.Install[name]; !ok {
			c.Install[name] = strings.Join(f[2:], " ")
			if c.file != "" {
				c.InstallFile[name] = c.file
			}
		}
	case "softdep":
		if len(f) < 2 {
			return fmt.Errorf("softdep needs a module: %q", line)
		}
		name := Normalize(f[1])
		s := c.Softdeps[name]
		mode := ""
		for _, tok := range f[2:] {
			switch tok {
			case "pre:", "post:":
				mode = tok
			default:
				// Names before any pre:/post: are ignored, as kmod ignores them.
				switch mode {
				case "pre:":
					s.Pre = append(s.Pre, Normalize(tok))
				case "post:":
					s.Post = append(s.Post, Normalize(tok))
				}
			}
		}
		c.Softdeps[name] = s
	}
	return nil
}

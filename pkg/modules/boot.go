// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"fmt"
	"strings"
)

// bootBlock returns why systemd-modules-load does not load module name
// when a modules-load.d line names it, or "" when it does (or when the
// module is built in: systemd then does nothing). It follows libkmod as
// systemd-modules-load drives it (kmod_module_new_from_lookup, then
// kmod_module_probe_insert_module with KMOD_PROBE_APPLY_BLACKLIST):
//
//   - a modprobe.d alias matching the name wins over the module of that
//     name: when none of its targets is the module, the name loads another
//     module;
//   - a blacklisted module is not loaded when named (by name or by alias);
//   - an install command runs instead of inserting the module (ipvs-guard
//     does not run it, and counts the module as not loaded unless the
//     command is the usual "modprobe --ignore-install <module>" wrapper);
//     an install command of a modules.dep dependency stops the chain the
//     same way, before the module.
//
// A blacklisted dependency is still loaded (the blacklist applies to the
// named module only), so it does not block.
func (c *ModprobeConfig) bootBlock(ix *Index, name string) string {
	if c == nil || ix.IsBuiltin(name) {
		return ""
	}
	if r := c.nameBlock(name); r != "" {
		return r
	}
	if !ix.Loadable(name) {
		return ""
	}
	e, err := ix.Entry(name)
	if err != nil {
		return ""
	}
	for i := len(e.Deps) - 1; i >= 0; i-- {
		d := ModuleNameFromPath(e.Deps[i])
		if ix.IsBuiltin(d) {
			continue
		}
		if cmd, ok := c.Install[d]; ok && !ignoresInstall(cmd, d) {
			return fmt.Sprintf("install command for its dependency %s in %s replaces loading it, so %s is not loaded (install %s %s)", d, c.InstallFile[d], name, d, cmd)
		}
	}
	return ""
}

// nameBlock returns why module name itself is not loaded when asked for by
// name, through modprobe.d (alias, blacklist, install command), or "".
func (c *ModprobeConfig) nameBlock(name string) string {
	if c == nil {
		return ""
	}
	if targets, files := c.configAlias(name); len(targets) > 0 && !contains(targets, name) {
		return fmt.Sprintf("alias in %s redirects %s to %s (that module is loaded instead)", strings.Join(files, ", "), name, strings.Join(targets, ", "))
	}
	if c.Blacklist[name] {
		return fmt.Sprintf("blacklisted in %s", c.BlacklistFile[name])
	}
	if cmd, ok := c.Install[name]; ok && !ignoresInstall(cmd, name) {
		return fmt.Sprintf("install command in %s replaces loading it (install %s %s)", c.InstallFile[name], name, cmd)
	}
	return ""
}

// ReplacesLoading reports whether module name has an install command that
// replaces loading it (kept, never run), and returns the command; the usual
// "modprobe --ignore-install <module>" wrapper loads it and does not count.
// kmod runs a dependency's install command too, so it blocks a module
// needed only as a dependency, which a blacklist does not.
func (c *ModprobeConfig) ReplacesLoading(name string) (string, bool) {
	if c == nil {
		return "", false
	}
	cmd, ok := c.Install[name]
	return cmd, ok && !ignoresInstall(cmd, name)
}

// aliasOnly reports whether only a modprobe.d alias keeps module name from
// loading by its name (no blacklist, no install command): kmod loads a
// dependency by its modules.dep path, never through an alias, so such a
// module is still loaded as the dependency of a module that needs it.
func (c *ModprobeConfig) aliasOnly(name string) bool {
	if c == nil || c.Blacklist[name] {
		return false
	}
	if cmd, ok := c.Install[name]; ok && !ignoresInstall(cmd, name) {
		return false
	}
	targets, _ := c.configAlias(name)
	return len(targets) > 0 && !contains(targets, name)
}

// configAlias returns the modules a modprobe.d alias resolves name to, and
// the files of the matching aliases (kmod_lookup_alias_from_config).
func (c *ModprobeConfig) configAlias(name string) (targets, files []string) {
	n := normalizeAlias(name)
	for _, a := range c.Aliases {
		if a.Match(n) {
			if !contains(targets, a.Module) {
				targets = append(targets, a.Module)
			}
			if a.File != "" && !contains(files, a.File) {
				files = append(files, a.File)
			}
		}
	}
	return targets, files
}

// ignoresInstall reports whether an install command for module is the
// usual wrapper that still loads it: it runs modprobe with --ignore-install
// (or -i) on the module itself.
func ignoresInstall(cmd, module string) bool {
	f := strings.FieldsFunc(cmd, func(r rune) bool { return r == ' ' || r == '\t' || r == ';' || r == '&' || r == '|' })
	mp, ign, mod := false, false, false
	for _, w := range f {
		switch {
		case strings.HasSuffix(w, "modprobe"):
			mp = true
		case w == "--ignore-install" || w == "-i":
			ign = true
		case Normalize(w) == module:
			mod = true
		}
	}
	return mp && ign && mod
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Finding is the state of one module. Its JSON form is the module finding
// of the diagnose report (docs/design.md §8).
type Finding struct {
	// Module is the module name.
	Module string `json:"module"`
	// Loaded: in /proc/modules, built in, or present in /sys/module.
	Loaded bool `json:"loaded"`
	// Builtin: compiled into the kernel (modules.builtin).
	Builtin bool `json:"builtin"`
	// Available: the kernel ships it (modules.dep or modules.builtin). In
	// JSON, null when that is unknown (no modules.dep and not loaded):
	// false means the kernel does not ship it.
	Available bool `json:"available"`
	// Declared: named in a modules-load.d *.conf file or /etc/modules, and
	// loaded by systemd-modules-load under that name (BootBlocked is empty).
	Declared bool `json:"declared"`
	// Stale: declared for boot but absent from this kernel.
	Stale bool `json:"stale"`
	// DeclaredIn lists the files (host paths) that declare it.
	DeclaredIn []string `json:"declared_in,omitempty"`
	// BootBlocked says why systemd-modules-load does not load the module
	// when modules-load.d names it: a modprobe.d blacklist, an install
	// command (its own or a dependency's) or an alias redirecting the name
	// to another module, naming the file. ipvs-guard then neither declares
	// nor loads it. Empty when nothing blocks it.
	BootBlocked string `json:"boot_blocked,omitempty"`
	// LoadedAsDependencyOf names the needed modules that load this one as
	// their dependency (at boot and by --fix) when only a modprobe.d alias
	// keeps it from loading by its name.
	LoadedAsDependencyOf []string `json:"loaded_as_dependency_of,omitempty"`

	release string
	wanted  bool
	unknown bool // modules.dep missing: availability unknown
}

// MarshalJSON renders the finding as the diagnose report's module finding,
// with "available": null when whether the kernel ships the module is
// unknown (the text says "availability unknown").
func (f Finding) MarshalJSON() ([]byte, error) {
	out := struct {
		Module      string   `json:"module"`
		Loaded      bool     `json:"loaded"`
		Builtin     bool     `json:"builtin"`
		Available   *bool    `json:"available"`
		Declared    bool     `json:"declared"`
		Stale       bool     `json:"stale"`
		DeclaredIn  []string `json:"declared_in,omitempty"`
		BootBlocked string   `json:"boot_blocked,omitempty"`
		DepOf       []string `json:"loaded_as_dependency_of,omitempty"`
	}{f.Module, f.Loaded, f.Builtin, nil, f.Declared, f.Stale, f.DeclaredIn, f.BootBlocked, f.LoadedAsDependencyOf}
	if !f.AvailabilityUnknown() {
		out.Available = &f.Available
	}
	return json.Marshal(out)
}

// AvailabilityUnknown reports whether it is unknown if the kernel ships
// the module: no modules.dep to tell, and not loaded.
func (f Finding) AvailabilityUnknown() bool { return f.unknown && !f.Available && !f.Builtin }

// String renders the finding as one line, e.g.
// "ip_vs_rr: loaded, available, declared in /etc/modules-load.d/ipvs.conf".
func (f Finding) String() string {
	if !f.wanted {
		// A stale declaration of a module IPVS mode does not need here.
		return fmt.Sprintf("%s: not in kernel %s, STALE declaration in %s (not needed by IPVS mode on this kernel)", f.Module, f.release, strings.Join(f.DeclaredIn, ", "))
	}
	var parts []string
	switch {
	case f.Builtin:
		parts = append(parts, "built in")
	case f.Loaded:
		parts = append(parts, "loaded")
	default:
		parts = append(parts, "NOT LOADED")
	}
	switch {
	case f.Builtin:
	case f.Available:
		parts = append(parts, "available")
	case f.unknown:
		parts = append(parts, "availability unknown (no modules.dep)")
	case f.release != "":
		parts = append(parts, "NOT IN KERNEL "+f.release)
	default:
		parts = append(parts, "NOT IN KERNEL")
	}
	switch {
	case f.Stale:
		parts = append(parts, "STALE declaration in "+strings.Join(f.DeclaredIn, ", "))
	case f.BootBlocked != "" && len(f.LoadedAsDependencyOf) > 0:
		parts = append(parts, "NOT LOADED BY ITS NAME: "+f.BootBlocked+"; loaded as a dependency of "+strings.Join(f.LoadedAsDependencyOf, ", "))
	case f.BootBlocked != "" && len(f.DeclaredIn) > 0:
		parts = append(parts, "named in "+strings.Join(f.DeclaredIn, ", ")+" but NOT LOADED AT BOOT: "+f.BootBlocked)
	case f.BootBlocked != "":
		parts = append(parts, "NOT LOADED AT BOOT: "+f.BootBlocked)
	case f.Declared:
		parts = append(parts, "declared in "+strings.Join(f.DeclaredIn, ", "))
	case f.Builtin || !f.Available:
	default:
		parts = append(parts, "NOT DECLARED for boot")
	}
	return f.Module + ": " + strings.Join(parts, ", ")
}

// State implements check.Finding: the module's ipvs_guard_modules_* state (a
// built-in module counts as loaded and available).
func (f Finding) State() check.State {
	return check.State{Module: &check.ModuleState{
		Module:    f.Module,
		Loaded:    f.Loaded || f.Builtin,
		Available: f.Available || f.Builtin,
		Declared:  f.Declared,
		Stale:     f.Stale,
	}}
}

// Observation is everything the modules check saw on the node.
type Observation struct {
	// Release is the kernel release of the root.
	Release string
	// Scheduler is the IPVS scheduler whose module is desired.
	Scheduler string
	// Desired are the modules IPVS mode needs, in load order.
	Desired []string
	// Findings has one entry per desired module (in Desired order), then
	// one per stale IPVS-related declaration of a module not desired.
	Findings []Finding
	// Index is the kernel's module index.
	Index *Index
	// Declarations are every boot declaration found.
	Declarations []Declaration
	// Modprobe is the modprobe.d configuration kmod applies.
	Modprobe *ModprobeConfig
	// NoModuleSupport is true when the kernel has no module support (no
	// /proc/modules): only built-in modules can ever be there.
	NoModuleSupport bool
}

// Observe reads the module state of the node at root for the given IPVS
// scheduler (empty means DefaultScheduler). It changes nothing. Errors are
// infrastructure failures: an unreadable or garbled /proc/modules,
// modules.dep or declaration file, or no kernel release.
func Observe(root hostfs.Root, scheduler string) (*Observation, error) {
	rel, err := root.KernelRelease()
	if err != nil {
		return nil, err
	}
	ix, err := ReadIndex(root, rel)
	if err != nil {
		return nil, err
	}
	return observeWith(root, scheduler, ix, nil)
}

// observeWith is Observe over an index already read (the kernel's module
// files do not change between the observations of one check run), reading
// modprobe.d through mp (nil: every file parsed).
func observeWith(root hostfs.Root, scheduler string, ix *Index, mp *ModprobeCache) (*Observation, error) {
	rel := ix.Release
	proc, err := ReadProcModules(root)
	if err != nil {
		return nil, err
	}
	loaded := map[string]bool{}
	for _, m := range proc {
		if m.State != "Unloading" {
			loaded[m.Name] = true
		}
	}
	inSys := func(name string) bool {
		if !validModuleName(name) || name == "." || name == ".." {
			return false
		}
		_, err := root.Stat(path.Join("/sys/module", name))
		return err == nil
	}
	// A module in /sys/module without an initstate file, and not in
	// /proc/modules, is built in: the kernel gives every loadable module an
	// initstate, and a built-in one appears in /sys/module only for its
	// parameters or version (nf_conntrack on kernels that build it in,
	// whatever modules.builtin, when mounted, says).
	builtinSys := func(name string) bool {
		if loaded[name] || !inSys(name) {
			return false
		}
		_, err := root.Stat(path.Join("/sys/module", name, "initstate"))
		return errors.Is(err, fs.ErrNotExist)
	}
	// A kernel without module support (no /proc/modules) loads nothing:
	// what is not built in can never be.
	_, perr := root.Stat("/proc/modules")
	noModules := errors.Is(perr, fs.ErrNotExist)
	// Without modules.dep the kernel's shipped set is unknown: decide the
	// conntrack module from what is loaded instead.
	var shipper Shipper = ix
	if ix.DepMissing {
		shipper = shipFunc(func(n string) bool { return ix.Ships(n) || loaded[n] || inSys(n) })
	}
	conf, err := mp.Read(root)
	if err != nil {
		return nil, err
	}
	o := &Observation{Release: rel, Scheduler: schedulerOrDefault(scheduler), Desired: Desired(scheduler, shipper), Index: ix, Modprobe: conf, NoModuleSupport: noModules}
	// Keep only the declarations a finding can be about: a huge foreign
	// file then costs reading time, not memory.
	o.Declarations, err = ScanDeclarations(root, func(m string) bool { return isIPVSRelated(m) || contains(o.Desired, m) })
	if err != nil {
		return nil, err
	}
	declaredIn := map[string][]string{}
	for _, d := range o.Declarations {
		if !contains(declaredIn[d.Module], d.File) {
			declaredIn[d.Module] = append(declaredIn[d.Module], d.File)
		}
	}
	// A module modules.dep lacks is "not in kernel" only when the index
	// agrees with itself: never decide that from a cut modules.dep.
	for _, m := range o.Desired {
		if !noModules && !ix.IsBuiltin(m) && !loaded[m] && !inSys(m) {
			if err := ix.ConfirmAbsent(m); err != nil {
				return nil, err
			}
		}
	}
	mk := func(name string, wanted bool) Finding {
		f := Finding{Module: name, Builtin: ix.IsBuiltin(name) || builtinSys(name) || noModules && inSys(name), DeclaredIn: declaredIn[name], release: rel, wanted: wanted, unknown: ix.DepMissing && !noModules}
		f.Loaded = loaded[name] || f.Builtin || inSys(name)
		f.Available = ix.Ships(name) && !noModules || f.Builtin || (ix.DepMissing && f.Loaded)
		if wanted && !f.Builtin && (f.Available || ix.DepMissing) {
			f.BootBlocked = conf.bootBlock(ix, name)
		}
		f.Declared = len(f.DeclaredIn) > 0 && f.BootBlocked == ""
		f.Stale = len(f.DeclaredIn) > 0 && !f.Available && !f.Loaded && (!ix.DepMissing || noModules)
		return f
	}
	for _, m := range o.Desired {
		o.Findings = append(o.Findings, mk(m, true))
	}
	// kmod (modprobe, systemd-modules-load) and ipvs-guard's loader load a
	// dependency by its modules.dep path, not through modprobe.d's
	// aliases: a needed module only an alias keeps from loading by name is
	// loaded anyway as the dependency of a needed module that is declared
	// and loaded (alias ip_vs veth: ip_vs_rr brings ip_vs.ko).
	for i := range o.Findings {
		f := &o.Findings[i]
		if f.BootBlocked == "" || !conf.aliasOnly(f.Module) {
			continue
		}
		for _, g := range o.Findings {
			if g.Module == f.Module || g.BootBlocked != "" || g.Builtin || !g.Available {
				continue
			}
			if e, err := ix.Entry(g.Module); err == nil && slices.ContainsFunc(e.Deps, func(d string) bool { return ModuleNameFromPath(d) == f.Module }) {
				f.LoadedAsDependencyOf = append(f.LoadedAsDependencyOf, g.Module)
			}
		}
	}
	var extra []string
	for m := range declaredIn {
		if !contains(o.Desired, m) && isIPVSRelated(m) {
			if f := mk(m, false); f.Stale {
				if err := ix.ConfirmAbsent(m); err != nil {
					return nil, err
				}
				extra = append(extra, m)
			}
		}
	}
	sort.Strings(extra)
	for _, m := range extra {
		o.Findings = append(o.Findings, mk(m, false))
	}
	return o, nil
}

type shipFunc func(string) bool

func (s shipFunc) Ships(n string) bool { return s(n) }

// problems groups the observation's findings by problem kind.
type problems struct {
	notInKernel, notLoaded, notPersisted []string
	stale, blocked                       []Finding
	availabilityUnknown                  bool
}

func (o *Observation) problems() problems {
	var p problems
	p.availabilityUnknown = o.Index.DepMissing && !o.NoModuleSupport
	for _, f := range o.Findings {
		if f.wanted {
			switch {
			case !f.Loaded && !f.Available && (!o.Index.DepMissing || o.NoModuleSupport):
				p.notInKernel = append(p.notInKernel, f.Module)
			case !f.Loaded:
				p.notLoaded = append(p.notLoaded, f.Module)
			}
			if f.BootBlocked != "" {
				p.blocked = append(p.blocked, f)
			} else if !f.Declared && !f.Builtin && (f.Available || o.Index.DepMissing && !o.NoModuleSupport) {
				p.notPersisted = append(p.notPersisted, f.Module)
			}
		}
		if f.Stale {
			p.stale = append(p.stale, f)
		}
	}
	return p
}

// declaredEverywhere reports whether every module that needs a boot
// declaration has one.
func (o *Observation) declaredEverywhere() bool { return len(o.problems().notPersisted) == 0 }

// describe renders "a", "a and b", "a, b and c".
func describe(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func isAre(names []string) string {
	if len(names) == 1 {
		return "is"
	}
	return "are"
}

func schedulerOrDefault(s string) string {
	if s == "" {
		return DefaultScheduler
	}
	return s
}

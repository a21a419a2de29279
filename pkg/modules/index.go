// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Index is what a kernel release ships, read from
// <root>/lib/modules/<release>/modules.dep and modules.builtin.
type Index struct {
	// Release is the kernel release, e.g. 6.1.0-56-amd64.
	Release string
	// Dir is <root>/lib/modules/<release>.
	Dir string
	// Builtin are the modules compiled into the kernel.
	Builtin map[string]bool
	// DepMissing is true when modules.dep does not exist (no /lib/modules
	// mount, or depmod never ran): availability is then unknown, not false.
	DepMissing bool

	deps depIndex // module name → its modules.dep line, split on demand
	root hostfs.Root
	host string // /lib/modules/<release>, a host path under root

	// Read on the first ConfirmAbsent (most runs never need them).
	files     map[string]string // module name → a module file under host (relative)
	filesErr  error
	filesRead bool
	depsErr   error // a dependency modules.dep does not list as a module
	depsRead  bool
}

// Limits of the files a module index and the loader are read from. Each is
// several times the largest real file (Debian 11, 12 and 13 kernels:
// modules.dep 0.50–0.63 MB, modules.alias 1.27–1.38 MB, modules.alias.bin
// 1.21–1.31 MB, modules.dep.bin 0.67–0.82 MB, modules.builtin 5.6–6.6 KB,
// modules.softdep 1.2–2.5 KB; /proc/modules is a few KiB), and small
// enough that diagnose (--fix included) with every one of them at its limit
// stays far inside the chart's 128 MiB memory limit: a module index is
// held in memory, so its limit is its cost (TestParserMemoryAtLimits,
// make bench-memory).
var (
	limitModulesDep     = hostfs.Limit{Kind: "modules.dep", Max: 4 << 20}
	limitModulesBuiltin = hostfs.Limit{Kind: "modules.builtin", Max: 1 << 20}
	limitModulesAlias   = hostfs.Limit{Kind: "modules.alias", Max: 4 << 20}
	limitBinIndex       = hostfs.Limit{Kind: "a binary module index", Max: 4 << 20}
	limitModulesSoftdep = hostfs.Limit{Kind: "modules.softdep", Max: 1 << 20}
	limitModprobeConf   = hostfs.Limit{Kind: "a modprobe.d file", Max: 1 << 20}
	limitProcModules    = hostfs.Limit{Kind: "/proc/modules", Max: 1 << 20}
	limitSmallKernel    = hostfs.Limit{Kind: "a sysfs value", Max: 4 << 10}
)

// ErrIndexInconsistent: the module index contradicts itself or the running
// kernel (an empty, truncated or stale modules.dep); nothing is decided
// from it.
var ErrIndexInconsistent = errors.New("the module index is empty, truncated or stale (run depmod)")

// ReadIndex reads the module index of release under root. A missing
// modules.dep is recorded in DepMissing; a missing modules.builtin means no
// built-in modules; an unreadable or malformed file is an error naming it.
// A modules.dep that lists no module, or whose last line is cut (no final
// newline), is an error wrapping ErrIndexInconsistent: never a reason to
// believe the kernel ships nothing.
func ReadIndex(root hostfs.Root, release string) (*Index, error) {
	if err := hostfs.ValidKernelRelease(release); err != nil {
		return nil, fmt.Errorf("reading the module index: %w", err)
	}
	host := path.Join("/lib/modules", release)
	ix := &Index{Release: release, Dir: root.Path(host), root: root, host: host, Builtin: map[string]bool{}}
	err := parseFile(root, path.Join(host, "modules.dep"), limitModulesDep, func(r io.Reader) error {
		data, err := readString(r)
		if err != nil {
			return err
		}
		if ix.deps, err = newDepIndex(data); err != nil {
			return err
		}
		if ix.deps.len() == 0 {
			return fmt.Errorf("it lists no module: %w", ErrIndexInconsistent)
		}
		if !strings.HasSuffix(data, "\n") {
			return fmt.Errorf("its last line is cut (no final newline): %w", ErrIndexInconsistent)
		}
		return nil
	})
	switch {
	case errors.Is(err, os.ErrNotExist):
		ix.DepMissing = true
		ix.deps = depIndex{}
	case err != nil:
		return nil, err
	}
	err = parseFile(root, path.Join(host, "modules.builtin"), limitModulesBuiltin, func(r io.Reader) error {
		b, err := ParseModulesBuiltin(r)
		ix.Builtin = b
		return err
	})
	switch {
	case errors.Is(err, os.ErrNotExist):
		ix.Builtin = map[string]bool{}
	case err != nil:
		return nil, err
	}
	return ix, nil
}

// Ships implements Shipper: the module is in modules.dep or modules.builtin.
func (ix *Index) Ships(name string) bool {
	if ix == nil {
		return false
	}
	name = Normalize(name)
	_, ok := ix.deps.lookup(name)
	return ok || ix.Builtin[name]
}

// Loadable reports whether modules.dep lists the module.
func (ix *Index) Loadable(name string) bool {
	if ix == nil {
		return false
	}
	_, ok := ix.deps.lookup(Normalize(name))
	return ok
}

// Entry returns the modules.dep entry of a loadable module. It wraps
// ErrModuleNotFound when modules.dep does not list it, and names the file
// when the module's line is malformed.
func (ix *Index) Entry(name string) (DepEntry, error) {
	name = Normalize(name)
	line, ok := ix.deps.lookup(name)
	if !ok {
		return DepEntry{}, fmt.Errorf("%s: %w: not in modules.dep of kernel %s", name, ErrModuleNotFound, ix.Release)
	}
	e, err := parseDepLine(name, line)
	if err != nil {
		return DepEntry{}, fmt.Errorf("parsing %s: %w", ix.root.Path(ix.host, "modules.dep"), err)
	}
	return e, nil
}

// Names returns the loadable modules' names, sorted.
func (ix *Index) Names() []string {
	out := make([]string, ix.deps.len())
	for i := range out {
		out[i] = ix.deps.name(i)
	}
	return out
}

// namesWithPrefix returns the loadable modules' names that start with
// prefix, sorted, without a list of every name.
func (ix *Index) namesWithPrefix(prefix string) []string {
	var out []string
	for i := ix.deps.search(prefix); i < ix.deps.len(); i++ {
		n := ix.deps.name(i)
		if !strings.HasPrefix(n, prefix) {
			break
		}
		out = append(out, n)
	}
	return out
}

// IsBuiltin reports whether the module is compiled into the kernel.
func (ix *Index) IsBuiltin(name string) bool { return ix != nil && ix.Builtin[Normalize(name)] }

// readString reads all of r into one string without the copy a []byte
// conversion would make.
func readString(r io.Reader) (string, error) {
	var b strings.Builder
	if n := hostfs.SizeHint(r); n > 0 && n < 1<<30 {
		b.Grow(int(n) + 1)
	}
	if _, err := io.Copy(&b, r); err != nil {
		return "", err
	}
	return b.String(), nil
}

// parseFile opens host path p under root (a regular file, at most lim) and
// hands it to parse; errors name the path and keep os.ErrNotExist visible to
// errors.Is.
func parseFile(root hostfs.Root, p string, lim hostfs.Limit, parse func(io.Reader) error) error {
	f, err := root.OpenLimited(p, lim)
	if err != nil {
		if errors.Is(err, hostfs.ErrTooLarge) || errors.Is(err, hostfs.ErrNotRegular) {
			return err
		}
		return fmt.Errorf("reading %s: %w", root.Path(p), err)
	}
	defer f.Close()
	if err := parse(f); err != nil {
		if errors.Is(err, hostfs.ErrTooLarge) {
			return fmt.Errorf("reading %w", err)
		}
		return fmt.Errorf("parsing %s: %w", root.Path(p), err)
	}
	return nil
}

// ConfirmAbsent returns nil when the index can be believed that the
// kernel does not ship the module, and an error wrapping
// ErrIndexInconsistent when it cannot: modules.dep.bin (depmod writes it
// from the same data) lists the module; modules.dep names a dependency it
// does not list as a module (a cut at a line boundary); or a module file of
// that name (.ko, .ko.xz, .ko.zst or .ko.gz) is under
// /lib/modules/<release> (modules.dep is cut or older than the files: run
// depmod). A module whose file is on disk is never "not in this kernel".
// It also returns an error when the module directory cannot be listed.
// A module modules.dep lists, a missing modules.dep or a nil index: nil.
func (ix *Index) ConfirmAbsent(name string) error {
	if ix == nil || ix.DepMissing || ix.Loadable(name) {
		return nil
	}
	name = Normalize(name)
	dep := ix.root.Path(ix.host, "modules.dep")
	p := path.Join(ix.host, "modules.dep.bin")
	if b, err := ix.root.ReadFile(p, limitBinIndex); err == nil {
		if x, err := parseBinIndex(b); err == nil {
			if vals, err := x.searchWild(name); err == nil && len(vals) > 0 {
				return fmt.Errorf("%s does not list %s but %s does: %w", dep, name, ix.root.Path(p), ErrIndexInconsistent)
			}
		}
	}
	if err := ix.danglingDeps(); err != nil {
		return err
	}
	files, err := ix.moduleFiles()
	if err != nil {
		return fmt.Errorf("could not confirm that kernel %s lacks %s: %w", ix.Release, name, err)
	}
	if f, ok := files[name]; ok {
		return fmt.Errorf("%s does not list %s but its module file %s exists (modules.dep is cut or older than the module files: run depmod %s): %w",
			dep, name, ix.root.Path(ix.host, f), ix.Release, ErrIndexInconsistent)
	}
	return nil
}

// danglingDeps returns an error wrapping ErrIndexInconsistent when a
// modules.dep line names a dependency modules.dep does not list: depmod
// lists every module it names, so the file lost lines.
func (ix *Index) danglingDeps() error {
	if ix.depsRead {
		return ix.depsErr
	}
	ix.depsRead = true
	names := ix.Names()
	for _, n := range names {
		e, err := ix.Entry(n)
		if err != nil {
			ix.depsErr = fmt.Errorf("%w: %w", err, ErrIndexInconsistent)
			return ix.depsErr
		}
		for _, d := range e.Deps {
			if dn := ModuleNameFromPath(d); !ix.Loadable(dn) {
				ix.depsErr = fmt.Errorf("%s lists %s as a dependency of %s but has no line for it (cut at a line boundary?): %w",
					ix.root.Path(ix.host, "modules.dep"), d, n, ErrIndexInconsistent)
				return ix.depsErr
			}
		}
	}
	return nil
}

// Bounds of the module directory walk: far above a distribution kernel's
// (about 6,000 files in a few hundred directories, depth 8).
const (
	maxModuleDirEntries = 1 << 20
	maxModuleDirDepth   = 32
)

// moduleFiles maps each module name with a file (any of moduleSuffixes)
// under /lib/modules/<release> to its path relative to that directory,
// walking it once. Links are not followed (build and source point to
// kernel headers); a directory that disappears is skipped; one that cannot
// be read is an error.
func (ix *Index) moduleFiles() (map[string]string, error) {
	if ix.filesRead {
		return ix.files, ix.filesErr
	}
	ix.filesRead = true
	files := map[string]string{}
	seen := 0
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > maxModuleDirDepth {
			return fmt.Errorf("listing %s: deeper than %d directories", ix.root.Path(ix.host, rel), maxModuleDirDepth)
		}
		ents, err := ix.root.ReadDir(path.Join(ix.host, rel))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", ix.root.Path(ix.host, rel), err)
		}
		for _, e := range ents {
			if seen++; seen > maxModuleDirEntries {
				return fmt.Errorf("listing %s: more than %d entries", ix.Dir, maxModuleDirEntries)
			}
			p := path.Join(rel, e.Name())
			switch t := e.Type(); {
			case t.IsDir():
				if err := walk(p, depth+1); err != nil {
					return err
				}
			case t.IsRegular():
				if n := ModuleNameFromPath(p); n != "" {
					if _, dup := files[n]; !dup {
						files[n] = p
					}
				}
			}
		}
		return nil
	}
	ix.filesErr = walk("", 0)
	if ix.filesErr == nil {
		ix.files = files
	}
	return ix.files, ix.filesErr
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
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

	deps map[string]string // module name → its modules.dep line, split on demand
}

// ReadIndex reads the module index of release under root. A missing
// modules.dep is recorded in DepMissing; a missing modules.builtin means no
// built-in modules; an unreadable or malformed file is an error naming it.
func ReadIndex(root hostfs.Root, release string) (*Index, error) {
	ix := &Index{Release: release, Dir: root.Path("/lib/modules", release), deps: map[string]string{}, Builtin: map[string]bool{}}
	err := parseFile(filepath.Join(ix.Dir, "modules.dep"), func(r io.Reader) error {
		data, err := readString(r)
		if err != nil {
			return err
		}
		ix.deps, err = indexModulesDep(data)
		return err
	})
	switch {
	case errors.Is(err, os.ErrNotExist):
		ix.DepMissing = true
		ix.deps = map[string]string{}
	case err != nil:
		return nil, err
	}
	err = parseFile(filepath.Join(ix.Dir, "modules.builtin"), func(r io.Reader) error {
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
	_, ok := ix.deps[name]
	return ok || ix.Builtin[name]
}

// Loadable reports whether modules.dep lists the module.
func (ix *Index) Loadable(name string) bool {
	if ix == nil {
		return false
	}
	_, ok := ix.deps[Normalize(name)]
	return ok
}

// Entry returns the modules.dep entry of a loadable module. It wraps
// ErrModuleNotFound when modules.dep does not list it, and names the file
// when the module's line is malformed.
func (ix *Index) Entry(name string) (DepEntry, error) {
	name = Normalize(name)
	line, ok := ix.deps[name]
	if !ok {
		return DepEntry{}, fmt.Errorf("%s: %w: not in modules.dep of kernel %s", name, ErrModuleNotFound, ix.Release)
	}
	e, err := parseDepLine(name, line)
	if err != nil {
		return DepEntry{}, fmt.Errorf("parsing %s: %w", filepath.Join(ix.Dir, "modules.dep"), err)
	}
	return e, nil
}

// Names returns the loadable modules' names, sorted.
func (ix *Index) Names() []string {
	out := make([]string, 0, len(ix.deps))
	for n := range ix.deps {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// IsBuiltin reports whether the module is compiled into the kernel.
func (ix *Index) IsBuiltin(name string) bool { return ix != nil && ix.Builtin[Normalize(name)] }

// readString reads all of r into one string without the copy a []byte
// conversion would make.
func readString(r io.Reader) (string, error) {
	var b strings.Builder
	if f, ok := r.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Size() > 0 && fi.Size() < 1<<30 {
			b.Grow(int(fi.Size()) + 1)
		}
	}
	if _, err := io.Copy(&b, r); err != nil {
		return "", err
	}
	return b.String(), nil
}

// parseFile opens path and hands it to parse; errors name the path and keep
// os.ErrNotExist visible to errors.Is.
func parseFile(path string, parse func(io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	if err := parse(f); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	return nil
}

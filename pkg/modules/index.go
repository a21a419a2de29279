// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Index is what a kernel release ships, read from
// <root>/lib/modules/<release>/modules.dep and modules.builtin.
type Index struct {
	// Release is the kernel release, e.g. 6.1.0-56-amd64.
	Release string
	// Dir is <root>/lib/modules/<release>.
	Dir string
	// Deps are the loadable modules by name.
	Deps map[string]DepEntry
	// Builtin are the modules compiled into the kernel.
	Builtin map[string]bool
	// DepMissing is true when modules.dep does not exist (no /lib/modules
	// mount, or depmod never ran): availability is then unknown, not false.
	DepMissing bool
}

// ReadIndex reads the module index of release under root. A missing
// modules.dep is recorded in DepMissing; a missing modules.builtin means no
// built-in modules; an unreadable or malformed file is an error naming it.
func ReadIndex(root hostfs.Root, release string) (*Index, error) {
	ix := &Index{Release: release, Dir: root.Path("/lib/modules", release), Deps: map[string]DepEntry{}, Builtin: map[string]bool{}}
	err := parseFile(filepath.Join(ix.Dir, "modules.dep"), func(r io.Reader) error {
		d, err := ParseModulesDep(r)
		ix.Deps = d
		return err
	})
	switch {
	case errors.Is(err, os.ErrNotExist):
		ix.DepMissing = true
		ix.Deps = map[string]DepEntry{}
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
	_, ok := ix.Deps[name]
	return ok || ix.Builtin[name]
}

// IsBuiltin reports whether the module is compiled into the kernel.
func (ix *Index) IsBuiltin(name string) bool { return ix != nil && ix.Builtin[Normalize(name)] }

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

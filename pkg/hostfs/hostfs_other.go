// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package hostfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Outside Linux the root is an os.Root: links that would leave it are
// refused rather than resolved inside it.

func (r Root) osRoot() (*os.Root, error) { return os.OpenRoot(r.dir()) }

// Open opens the regular file at host path p for reading, inside the root.
func (r Root) Open(p string) (*os.File, error) {
	rt, err := r.osRoot()
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	fi, err := rt.Stat(rel(p))
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, fmt.Errorf("reading %s: is a directory", r.Path(p))
		}
		return nil, fmt.Errorf("reading %s: %w", r.Path(p), ErrNotRegular)
	}
	return rt.Open(rel(p))
}

// IsDevNull reports whether fi is /dev/null.
func IsDevNull(fi os.FileInfo) bool { return fi.Mode()&os.ModeCharDevice != 0 && fi.Name() == "null" }

func (r Root) openDir(p string) (*os.File, error) {
	rt, err := r.osRoot()
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	return rt.Open(rel(p))
}

// Stat returns the file info of host path p, following links inside the root.
func (r Root) Stat(p string) (os.FileInfo, error) {
	rt, err := r.osRoot()
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	return rt.Stat(rel(p))
}

// Lstat returns the file info of host path p; a final symbolic link is not followed.
func (r Root) Lstat(p string) (os.FileInfo, error) {
	rt, err := r.osRoot()
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	return rt.Lstat(rel(p))
}

// Readlink returns the target of the symbolic link at host path p.
func (r Root) Readlink(p string) (string, error) {
	rt, err := r.osRoot()
	if err != nil {
		return "", err
	}
	defer rt.Close()
	return rt.Readlink(rel(p))
}

// WriteFileAtomic replaces the file at host path p with data through a
// temporary file renamed over it, inside the root.
func (r Root) WriteFileAtomic(p string, data []byte, perm os.FileMode) error {
	rt, err := r.osRoot()
	if err != nil {
		return err
	}
	defer rt.Close()
	name := rel(p)
	if err := rt.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", r.Path(p), err)
	}
	if fi, err := rt.Lstat(name); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("writing %s: %w", r.Path(p), ErrNotRegular)
		}
		perm = fi.Mode().Perm()
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("writing %s: %w", r.Path(p), err)
	}
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".tmp")
	if err := rt.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("writing %s: %w", r.Path(p), err)
	}
	if err := rt.Rename(tmp, name); err != nil {
		_ = rt.Remove(tmp)
		return fmt.Errorf("writing %s: %w", r.Path(p), err)
	}
	return nil
}

// RemoveIfSame removes the file at host path p, inside the root, when it is
// still the file read (os.SameFile); another file under the name wraps
// ErrChanged.
func (r Root) RemoveIfSame(p string, read os.FileInfo) error {
	rt, err := r.osRoot()
	if err != nil {
		return err
	}
	defer rt.Close()
	fi, err := rt.Lstat(rel(p))
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || !os.SameFile(fi, read) {
		return fmt.Errorf("removing %s: %w", r.Path(p), ErrChanged)
	}
	return rt.Remove(rel(p))
}

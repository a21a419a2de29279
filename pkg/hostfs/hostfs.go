// SPDX-License-Identifier: Apache-2.0

// Package hostfs reads and writes host paths under an optional root, so every
// check can read a captured host tree (diagnose --root) or the host's
// filesystem mounted into a pod (/host) exactly like the real /.
//
// Every access is confined: each path component, symbolic links included,
// resolves inside the root the way the host would see it (an absolute link
// target starts at the root, ".." stops at it), through openat2's
// RESOLVE_IN_ROOT on Linux and os.Root elsewhere. Only regular files are
// read (the kernel's proc and sys files are regular files too), never more
// than a per-kind limit, and a named pipe or device is refused without
// blocking. Writes go through the same confinement.
package hostfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Errors the readers wrap (test with errors.Is).
var (
	// ErrNotRegular: the path is a named pipe, socket or device, not a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file is larger than its kind's limit.
	ErrTooLarge = errors.New("file too large")
)

// Root is a host filesystem root. The zero value is "/".
type Root struct {
	// Dir prefixes every absolute host path; empty means "/".
	Dir string
}

// New returns a Root for dir ("" or "/" mean the real root).
func New(dir string) Root { return Root{Dir: dir} }

// Path returns the host path p (absolute, e.g. "/proc/modules") prefixed
// with the root, for messages. It is lexical only: never open it directly
// (a symbolic link in it may point outside the root); use the Root's
// methods, which resolve inside the root.
func (r Root) Path(p ...string) string {
	joined := filepath.Join(p...)
	if r.IsHost() {
		return filepath.Clean("/" + joined)
	}
	return filepath.Join(r.Dir, joined)
}

// IsHost reports whether the root is the real "/" (so syscalls such as
// finit_module act on the same kernel the files describe).
func (r Root) IsHost() bool { return r.Dir == "" || filepath.Clean(r.Dir) == "/" }

// dir is the root directory to resolve in.
func (r Root) dir() string {
	if r.IsHost() {
		return "/"
	}
	return r.Dir
}

// rel turns a host path into a clean path relative to the root ("." for the root).
func rel(p string) string {
	c := filepath.Clean("/" + p)
	if c == "/" {
		return "."
	}
	return c[1:]
}

// Limit bounds how much of one kind of file is read: far above any real
// file of that kind, so reaching it means the file is not what it claims.
type Limit struct {
	// Kind names the file kind in the error, e.g. "modules.dep".
	Kind string
	// Max is the largest size read, in bytes.
	Max int64
}

func (l Limit) String() string {
	switch {
	case l.Max >= 1<<20 && l.Max%(1<<20) == 0:
		return fmt.Sprintf("%d MiB limit for %s", l.Max>>20, l.Kind)
	case l.Max >= 1<<10 && l.Max%(1<<10) == 0:
		return fmt.Sprintf("%d KiB limit for %s", l.Max>>10, l.Kind)
	}
	return fmt.Sprintf("%d-byte limit for %s", l.Max, l.Kind)
}

// limitedFile reads a file and fails with ErrTooLarge past the limit.
type limitedFile struct {
	f    *os.File
	path string
	lim  Limit
	n    int64
	size int64 // from fstat: 0 for a proc or sys file
}

// Size returns the file's size when it was opened (0 for a proc or sys
// file, whose size is not known before reading it), so a reader can size
// its buffer once instead of growing it (see SizeHint).
func (l *limitedFile) Size() int64 { return l.size }

// SizeHint returns the size of a file OpenLimited opened (at most its
// limit), or 0 when r is something else or the size is unknown.
func SizeHint(r io.Reader) int64 {
	if s, ok := r.(interface{ Size() int64 }); ok {
		return max(s.Size(), 0)
	}
	return 0
}

func (l *limitedFile) Read(p []byte) (int, error) {
	if l.n > l.lim.Max {
		return 0, fmt.Errorf("%s is larger than the %s: %w", l.path, l.lim, ErrTooLarge)
	}
	if rest := l.lim.Max + 1 - l.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := l.f.Read(p)
	l.n += int64(n)
	if l.n > l.lim.Max {
		return n - int(l.n-l.lim.Max), fmt.Errorf("%s is larger than the %s: %w", l.path, l.lim, ErrTooLarge)
	}
	return n, err
}

func (l *limitedFile) Close() error { return l.f.Close() }

// OpenLimited opens the regular file at host path p for reading at most
// lim.Max bytes: a larger file fails at once when its size says so (a proc
// file's size is 0, so it fails when the reading passes the limit). Errors
// name the path and wrap ErrNotRegular, ErrTooLarge or the os error
// (os.ErrNotExist for a missing file or a dangling link).
func (r Root) OpenLimited(p string, lim Limit) (io.ReadCloser, error) {
	f, err := r.Open(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("reading %s: %w", r.Path(p), err)
	}
	if fi.Size() > lim.Max {
		f.Close()
		return nil, fmt.Errorf("reading %s: %d bytes is more than the %s: %w", r.Path(p), fi.Size(), lim, ErrTooLarge)
	}
	return &limitedFile{f: f, path: r.Path(p), lim: lim, size: fi.Size()}, nil
}

// ReadFile reads the regular file at host path p, at most lim.Max bytes.
// A file whose size is known is read into one buffer of that size (plus
// one byte to see the end), not a growing one, so reading it costs its
// size once.
func (r Root) ReadFile(p string, lim Limit) ([]byte, error) {
	rc, err := r.OpenLimited(p, lim)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := readAllSized(rc, SizeHint(rc))
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, fmt.Errorf("reading %w", err)
		}
		return nil, fmt.Errorf("reading %s: %w", r.Path(p), err)
	}
	return b, nil
}

// ReadAll reads r to its end like io.ReadAll, into one buffer of the
// file's size when r was opened by OpenLimited (see SizeHint).
func ReadAll(r io.Reader) ([]byte, error) { return readAllSized(r, SizeHint(r)) }

// readAllSized is io.ReadAll starting from a buffer of size+1 bytes.
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			// The file grew while read: go on as io.ReadAll does.
			b = append(b, 0)[:len(b)]
		}
	}
}

// ReadDir lists the directory at host path p, sorted by name.
func (r Root) ReadDir(p string) ([]os.DirEntry, error) {
	d, err := r.openDir(p)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", r.Path(p), err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	return ents, nil
}

// KernelReleaseLimit bounds osrelease (the kernel's utsname release field holds 64 bytes).
var KernelReleaseLimit = Limit{Kind: "a kernel release", Max: 4 << 10}

// KernelRelease reads the running kernel's release from
// <root>/proc/sys/kernel/osrelease. It must be one line of at most 64
// characters from [A-Za-z0-9._+~-], not "." or "..": it names a directory
// under /lib/modules.
func (r Root) KernelRelease() (string, error) {
	const p = "/proc/sys/kernel/osrelease"
	b, err := r.ReadFile(p, KernelReleaseLimit)
	if err != nil {
		return "", fmt.Errorf("reading kernel release: %w", err)
	}
	rel := strings.TrimSuffix(string(b), "\n")
	if err := ValidKernelRelease(rel); err != nil {
		return "", fmt.Errorf("reading kernel release: %s: %w", r.Path(p), err)
	}
	return rel, nil
}

// ValidKernelRelease checks a kernel release string (see KernelRelease).
func ValidKernelRelease(rel string) error {
	switch {
	case rel == "":
		return errors.New("no kernel release in it")
	case len(rel) > 64:
		return fmt.Errorf("%d characters is not a kernel release (at most 64)", len(rel))
	case rel == "." || rel == "..":
		return fmt.Errorf("%q is not a kernel release", rel)
	}
	for _, c := range rel {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._+~-", c)) {
			return fmt.Errorf("%q is not a kernel release: it holds %q", rel, c)
		}
	}
	return nil
}

// ErrChanged: the file at a path is no longer the one that was read (it
// was replaced, or the name is a symbolic link), so it is not removed.
var ErrChanged = errors.New("the file changed since it was read")

// ReadFileStat reads the regular file at host path p like ReadFile and
// returns, with its content, the file info of the very file read (fstat
// of the descriptor): hand it to RemoveIfSame to remove that file and no
// other.
func (r Root) ReadFileStat(p string, lim Limit) ([]byte, os.FileInfo, error) {
	f, err := r.Open(p)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", r.Path(p), err)
	}
	if fi.Size() > lim.Max {
		return nil, nil, fmt.Errorf("reading %s: %d bytes is more than the %s: %w", r.Path(p), fi.Size(), lim, ErrTooLarge)
	}
	b, err := readAllSized(&limitedFile{f: f, path: r.Path(p), lim: lim, size: fi.Size()}, fi.Size())
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, nil, fmt.Errorf("reading %w", err)
		}
		return nil, nil, fmt.Errorf("reading %s: %w", r.Path(p), err)
	}
	return b, fi, nil
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"syscall"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// DefaultDeclarationFile is the modules-load.d file ipvs-guard owns.
const DefaultDeclarationFile = "/etc/modules-load.d/ipvs.conf"

// EtcModules is Debian's /etc/modules (read by kmod's boot script and by
// systemd-modules-load on Debian, which links it into modules-load.d).
const EtcModules = "/etc/modules"

// ModulesLoadDirs are the directories systemd-modules-load reads, in
// priority order: a file in an earlier directory overrides a same-named file
// in a later one.
var ModulesLoadDirs = []string{
	"/etc/modules-load.d",
	"/run/modules-load.d",
	"/usr/local/lib/modules-load.d",
	"/usr/lib/modules-load.d",
	"/lib/modules-load.d",
}

// Declaration is one module named for loading at boot.
type Declaration struct {
	// Module is the declared module name (normalised).
	Module string
	// File is the host path of the file (without the --root prefix).
	File string
	// Line is the 1-based line number.
	Line int
}

// limitModulesLoadConf bounds one modules-load.d file or /etc/modules (real
// ones hold a few lines); it is read as a stream, so memory does not grow
// with it.
var limitModulesLoadConf = hostfs.Limit{Kind: "a modules-load.d file", Max: 16 << 20}

// limitOwnedDeclarationFile bounds the file the owned declaration file is
// merged from (the owned file itself, or the same-named file systemd reads
// today): unlike the others it is held in memory, merged and written, so
// it gets a limit thousands of times a real one (a few lines, under 1 KiB)
// that keeps diagnose --fix within a few MiB.
var limitOwnedDeclarationFile = hostfs.Limit{Kind: "the modules-load.d file ipvs-guard merges", Max: 1 << 20}

// maxModulesLoadLine is systemd's LONG_LINE_MAX: systemd-modules-load stops
// reading a file at a longer line.
const maxModulesLoadLine = 1 << 20

// ParseModulesLoad parses a modules-load.d file the way systemd-modules-load
// reads it: a line ends at LF, CR, CR LF or NUL; leading and trailing
// whitespace is ignored; lines starting with '#' or ';' are comments; the
// whole rest is the module name. With etcModules set it parses Debian's
// /etc/modules instead (kmod's boot script: LF ends a line, only '#' starts
// a comment, words after the module name are parameters). The returned
// declarations carry no File.
func ParseModulesLoad(r io.Reader, etcModules bool) ([]Declaration, error) {
	var out []Declaration
	err := scanModulesLoad(r, etcModules, func(d Declaration) { out = append(out, d) })
	return out, err
}

// scanModulesLoad streams the declarations of r to fn (see ParseModulesLoad).
func scanModulesLoad(r io.Reader, etcModules bool, fn func(Declaration)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxModulesLoadLine+2)
	if !etcModules {
		sc.Split(splitSystemdLines)
	}
	n := 0
	for sc.Scan() {
		n++
		name, ok := declaredModule(sc.Text(), etcModules)
		if !ok {
			continue
		}
		fn(Declaration{Module: name, Line: n})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes (systemd-modules-load stops reading there): %w", n+1, maxModulesLoadLine, err)
		}
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	return nil
}

// splitSystemdLines is a bufio.SplitFunc ending lines as systemd's
// read_line does: at LF, CR, CR LF or NUL.
func splitSystemdLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	i := bytes.IndexAny(data, "\n\r\x00")
	switch {
	case i < 0 && atEOF && len(data) > 0:
		return len(data), data, nil
	case i < 0:
		return 0, nil, nil
	case data[i] == '\r' && i+1 == len(data) && !atEOF:
		return 0, nil, nil // a LF may follow
	case data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n':
		return i + 2, data[:i], nil
	}
	return i + 1, data[:i], nil
}

// declaredModule returns the module a line declares, if any.
func declaredModule(line string, etcModules bool) (string, bool) {
	l := strings.TrimSpace(line)
	if l == "" || l[0] == '#' || (!etcModules && l[0] == ';') {
		return "", false
	}
	if etcModules {
		l = strings.Fields(l)[0]
	}
	return Normalize(l), true
}

// ModulesLoadFiles returns, per file name, the modules-load.d file
// systemd-modules-load reads under that name (host paths): systemd lists
// every entry ending in .conf that is not hidden (a leading '.') and is a
// regular file or a symbolic link — a directory is not listed — and the
// first directory of ModulesLoadDirs holding a name wins, whatever the
// entry turns out to be (a dangling link or a link to /dev/null, which
// systemd reads as nothing, still hides the same name in later
// directories). A missing directory, or a path that is not one, is skipped
// as systemd does; an unreadable one is an error.
func ModulesLoadFiles(root hostfs.Root) (map[string]string, error) {
	files := map[string]string{} // base name → host path
	for _, dir := range ModulesLoadDirs {
		ents, err := root.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", root.Path(dir), err)
		}
		for _, e := range ents {
			name := e.Name()
			if !strings.HasSuffix(name, ".conf") || strings.HasPrefix(name, ".") || files[name] != "" {
				continue
			}
			if t := e.Type(); t != 0 && t&fs.ModeSymlink == 0 {
				continue // a directory, pipe, socket or device: systemd does not list it
			}
			files[name] = path.Join(dir, name)
		}
	}
	return files, nil
}

// openDeclarations opens the modules-load.d file or /etc/modules at host
// path p the way systemd-modules-load and kmod reach it: a link to
// /dev/null, a dangling link, a link to a directory or /dev/null itself
// read as nothing (nil, nil); a named pipe, socket or other device is an
// error (systemd would block on it or fail); links resolve inside root.
func openDeclarations(root hostfs.Root, p string, lim hostfs.Limit) (io.ReadCloser, error) {
	if fi, err := root.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if t, err := root.Readlink(p); err == nil && isDevNullTarget(p, t) {
			return nil, nil
		}
	}
	f, err := root.OpenLimited(p, lim)
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return nil, nil
	case errors.Is(err, hostfs.ErrNotRegular):
		if fi, serr := root.Stat(p); serr == nil && hostfs.IsDevNull(fi) {
			return nil, nil
		}
	}
	return nil, err
}

// isDevNullTarget reports whether a link at p pointing to target names /dev/null.
func isDevNullTarget(p, target string) bool {
	if !path.IsAbs(target) {
		target = path.Join(path.Dir(p), target)
	}
	return path.Clean(target) == "/dev/null"
}

// maxDeclarations bounds the declarations ScanDeclarations holds: a real
// host declares a few dozen modules; a file declaring thousands of
// distinct ones (each one a finding if the kernel lacks it) is not a host's.
const maxDeclarations = 4096

// ErrTooManyDeclarations: the modules-load.d files declare more distinct
// modules than maxDeclarations.
var ErrTooManyDeclarations = errors.New("too many module declarations")

// ScanDeclarations returns the modules declared for boot on the host at
// root for which keep returns true (nil keeps all): those of each file
// ModulesLoadFiles lists, in file-name order, then those of Debian's
// /etc/modules, the first line declaring a module in a file only. Only
// the declarations kept are held in memory, so a huge file costs its
// reading time, not its size; more than maxDeclarations of them is an
// error wrapping ErrTooManyDeclarations. A missing directory or
// /etc/modules is fine; an unreadable one is an error.
func ScanDeclarations(root hostfs.Root, keep func(module string) bool) ([]Declaration, error) {
	files, err := ModulesLoadFiles(root)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Declaration
	read := func(p string, etc bool) error {
		f, err := openDeclarations(root, p, limitModulesLoadConf)
		if err != nil || f == nil {
			return err
		}
		defer f.Close()
		seen := map[string]bool{}
		err = scanModulesLoad(f, etc, func(d Declaration) {
			if seen[d.Module] || (keep != nil && !keep(d.Module)) || len(out) > maxDeclarations {
				return
			}
			seen[d.Module] = true
			d.File = p
			out = append(out, d)
		})
		if err == nil && len(out) > maxDeclarations {
			return fmt.Errorf("%s and the files before it declare more than %d distinct modules (a real host declares a few dozen): %w", root.Path(p), maxDeclarations, ErrTooManyDeclarations)
		}
		if errors.Is(err, hostfs.ErrTooLarge) {
			return fmt.Errorf("reading %w", err)
		}
		if err != nil {
			return fmt.Errorf("parsing %s: %w", root.Path(p), err)
		}
		return nil
	}
	for _, n := range names {
		if err := read(files[n], false); err != nil {
			return nil, err
		}
	}
	if err := read(EtcModules, true); err != nil {
		return nil, err
	}
	return out, nil
}

// MergeResult is the outcome of merging the desired modules into a
// declaration file.
type MergeResult struct {
	// Content is the new file content.
	Content []byte
	// Added are the modules appended.
	Added []string
	// CommentedOut are the stale modules turned into comments.
	CommentedOut []string
	// Changed is true when Content differs from the input.
	Changed bool
}

// newFileHeader starts a declaration file ipvs-guard creates.
const newFileHeader = "# Kernel modules for kube-proxy in IPVS mode, loaded at boot by systemd-modules-load.\n" +
	"# Maintained by ipvs-guard: it adds missing modules and comments out ones this kernel\n" +
	"# lacks; every other line is kept as written.\n"

// MergeDeclarations merges want into the content of a modules-load.d file
// ipvs-guard owns. Every existing line is kept byte for byte (comments '#'
// and ';', blank lines, CRLF or LF line ends, other modules), except lines
// declaring a module in stale, which become
//
//	# <module>  # ipvs-guard: <reason>
//
// Modules in want that no line declares are appended, one per line, with the
// file's line ending (CRLF when most lines use it). An empty input gets a
// short header first. Changed tells whether anything differs.
//
// The input is walked in place and the output buffer is sized once, so a
// merge holds the input and one output, never a copy per line.
func MergeDeclarations(existing []byte, want []string, stale map[string]string) MergeResult {
	var res MergeResult
	crlf, lf := bytes.Count(existing, []byte("\r\n")), bytes.Count(existing, []byte("\n"))
	lf -= crlf
	eol := "\n"
	if crlf > lf {
		eol = "\r\n"
	}
	var b bytes.Buffer
	b.Grow(len(existing) + len(newFileHeader) + 64*len(want) + 64*len(stale))
	present := map[string]bool{}
	for rest := existing; len(rest) > 0; {
		l := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			l, rest = rest[:i+1], rest[i+1:]
		} else {
			rest = nil
		}
		body := bytes.TrimRight(l, "\r\n")
		end := l[len(body):]
		if bytes.ContainsAny(body, "\r\x00") {
			// Several lines to systemd (a lone CR or a NUL ends one): kept
			// as written, each module it declares counted as present.
			_ = scanModulesLoad(bytes.NewReader(body), false, func(d Declaration) { present[d.Module] = true })
			b.Write(l)
			continue
		}
		name, ok := declaredModule(string(body), false)
		if ok {
			if reason, isStale := stale[name]; isStale {
				if len(end) == 0 {
					end = []byte(eol)
				}
				fmt.Fprintf(&b, "# %s  # ipvs-guard: %s%s", strings.TrimSpace(string(body)), reason, end)
				if !contains(res.CommentedOut, name) {
					res.CommentedOut = append(res.CommentedOut, name)
				}
				continue
			}
			present[name] = true
		}
		b.Write(l)
	}
	for _, m := range want {
		m = Normalize(m)
		if present[m] {
			continue
		}
		if _, isStale := stale[m]; isStale {
			continue
		}
		if b.Len() == 0 && len(existing) == 0 {
			b.WriteString(strings.ReplaceAll(newFileHeader, "\n", eol))
		}
		if b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
			b.WriteString(eol)
		}
		b.WriteString(m + eol)
		present[m] = true
		res.Added = append(res.Added, m)
	}
	res.Content = b.Bytes()
	res.Changed = !bytes.Equal(res.Content, existing)
	return res
}

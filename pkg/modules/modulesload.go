// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

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

// ParseModulesLoad parses a modules-load.d file: one module per line,
// leading and trailing whitespace ignored, lines starting with '#' or ';'
// are comments (systemd-modules-load's rules; the whole line is the module
// name). With etcModules set it parses Debian's /etc/modules instead, where
// only '#' starts a comment and words after the module name are parameters.
// The returned declarations carry no File.
func ParseModulesLoad(r io.Reader, etcModules bool) ([]Declaration, error) {
	var out []Declaration
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		name, ok := declaredModule(sc.Text(), etcModules)
		if !ok {
			continue
		}
		out = append(out, Declaration{Module: name, Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return out, nil
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

// ScanDeclarations returns every module declared for boot on the host at
// root: each *.conf file systemd-modules-load would read (earlier
// directories override same-named files in later ones; a file linked to
// /dev/null masks its name), in file-name order, then Debian's /etc/modules.
// A missing directory or /etc/modules is fine; an unreadable one is an error.
func ScanDeclarations(root hostfs.Root) ([]Declaration, error) {
	files := map[string]string{} // base name → host path
	masked := map[string]bool{}
	for _, dir := range ModulesLoadDirs {
		ents, err := os.ReadDir(root.Path(dir))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", root.Path(dir), err)
		}
		for _, e := range ents {
			name := e.Name()
			if !strings.HasSuffix(name, ".conf") || e.IsDir() || files[name] != "" || masked[name] {
				continue
			}
			p := filepath.Join(dir, name)
			if e.Type()&os.ModeSymlink != 0 {
				if t, err := os.Readlink(root.Path(p)); err == nil && t == "/dev/null" {
					masked[name] = true
					continue
				}
			}
			files[name] = p
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Declaration
	read := func(p string, etc bool) error {
		f, err := os.Open(root.Path(p))
		if err != nil {
			return fmt.Errorf("reading %s: %w", root.Path(p), err)
		}
		defer f.Close()
		ds, err := ParseModulesLoad(f, etc)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", root.Path(p), err)
		}
		for _, d := range ds {
			d.File = p
			out = append(out, d)
		}
		return nil
	}
	for _, n := range names {
		if err := read(files[n], false); err != nil {
			return nil, err
		}
	}
	if err := read(EtcModules, true); err != nil && !errors.Is(err, os.ErrNotExist) {
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
func MergeDeclarations(existing []byte, want []string, stale map[string]string) MergeResult {
	var res MergeResult
	lines := bytes.SplitAfter(existing, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	crlf, lf := 0, 0
	for _, l := range lines {
		switch {
		case bytes.HasSuffix(l, []byte("\r\n")):
			crlf++
		case bytes.HasSuffix(l, []byte("\n")):
			lf++
		}
	}
	eol := "\n"
	if crlf > lf {
		eol = "\r\n"
	}
	var b bytes.Buffer
	present := map[string]bool{}
	for _, l := range lines {
		body := bytes.TrimRight(l, "\r\n")
		end := l[len(body):]
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

// WriteFileAtomic replaces path with data so that readers see either the
// old or the new content: a temporary file in the same directory is
// written, fsynced and renamed over path, then the directory is fsynced. An
// existing file keeps its mode (and, when possible, owner); a new one gets
// perm. The directory is created (0755) when missing.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	mode := perm
	var owner *[2]int
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
		owner = fileOwner(fi)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if owner != nil {
		_ = tmp.Chown(owner[0], owner[1]) // best effort: keep the owner when we may
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		serr := d.Sync()
		d.Close()
		if serr != nil {
			return fmt.Errorf("writing %s: syncing directory: %w", path, serr)
		}
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// ProcModule is one line of /proc/modules.
type ProcModule struct {
	// Name is the module name (normalised).
	Name string
	// Size is the module's memory size in bytes.
	Size uint64
	// RefCount is the number of references ("-" on kernels without module unloading is -1).
	RefCount int
	// UsedBy lists the modules that depend on this one.
	UsedBy []string
	// State is Live, Loading or Unloading ("" when the kernel does not say).
	State string
}

// ParseProcModules parses the content of /proc/modules:
//
//	ip_vs 184320 6 ip_vs_sh,ip_vs_wrr,ip_vs_rr, Live 0xffffffffc0a2b000
//
// Lines must have at least the name, size and reference count; a line that
// does not is an error naming the line, so a garbled file never reads as
// "nothing loaded".
func ParseProcModules(r io.Reader) ([]ProcModule, error) {
	var out []ProcModule
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want at least name, size and reference count, got %q", n, line)
		}
		if !validModuleName(f[0]) {
			return nil, fmt.Errorf("line %d: invalid module name %q", n, f[0])
		}
		size, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: size %q: %w", n, f[1], err)
		}
		m := ProcModule{Name: Normalize(f[0]), Size: size, RefCount: -1}
		if f[2] != "-" {
			rc, err := strconv.Atoi(f[2])
			if err != nil {
				return nil, fmt.Errorf("line %d: reference count %q: %w", n, f[2], err)
			}
			m.RefCount = rc
		}
		if len(f) > 3 && f[3] != "-" {
			for _, u := range strings.Split(f[3], ",") {
				if u != "" {
					m.UsedBy = append(m.UsedBy, Normalize(u))
				}
			}
		}
		if len(f) > 4 {
			m.State = f[4]
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return out, nil
}

// ReadProcModules reads and parses /proc/modules under root. A missing file
// (a kernel built without module support) reads as no modules; any other
// failure (a directory, a named pipe, no permission, garbage, more than its
// size limit) is an error naming the path.
func ReadProcModules(root hostfs.Root) ([]ProcModule, error) {
	const p = "/proc/modules"
	f, err := root.OpenLimited(p, limitProcModules)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading loaded modules: %w", err)
	}
	defer f.Close()
	mods, err := ParseProcModules(f)
	if err != nil {
		return nil, fmt.Errorf("reading loaded modules from %s: %w", root.Path(p), err)
	}
	return mods, nil
}

// validModuleName reports whether s can be a module name: printable ASCII,
// no whitespace, no path separator, at most 64 bytes (MODULE_NAME_LEN - 1 is
// 55 on 64-bit kernels; a little slack costs nothing).
func validModuleName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '/' || c == ',' || c == '#' || c == ';' || c == ':' || c == '*' || c == '?' || c == '[' || c == ']' || c == '=' {
			return false
		}
	}
	return true
}

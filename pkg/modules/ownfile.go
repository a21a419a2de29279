// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// staleMark is what MergeDeclarations writes after a module it comments out
// because the kernel lacks it (check.go: "not in kernel <release>").
const staleMark = "  # ipvs-guard: not in kernel "

// WrittenByIPVSGuard reports whether content is, line for line, a
// declaration file ipvs-guard itself writes: its header (LF line ends, as
// it writes a new file), then one line per module it declares, each either
// the module's bare name or the line it makes of a module the kernel lacks
// ("# <module>  # ipvs-guard: not in kernel <release>"), the modules being
// those Desired returns for one scheduler, in Desired's order (ip_vs,
// ip_vs_rr, ip_vs_wrr, ip_vs_sh, the scheduler's module, the conntrack
// module), some possibly missing (a module the kernel lacked when the file
// was written is not written), none twice. Anything else — a comment, a
// blank line, another module, a module out of that order (appended by
// hand), CR LF line ends, text after the last line end — is someone's
// addition, and ipvs-guard never removes such a file. A file ipvs-guard
// itself extended after a scheduler or kernel change can fail the test
// too: it is then kept and reported, never removed (the safe side).
func WrittenByIPVSGuard(content []byte) bool {
	rest, ok := bytes.CutPrefix(content, []byte(newFileHeader))
	if !ok || len(rest) == 0 || rest[len(rest)-1] != '\n' {
		return false
	}
	lines := strings.Split(string(rest[:len(rest)-1]), "\n")
	var mods []string
	for _, l := range lines {
		m, ok := ownLine(l)
		if !ok || contains(mods, m) {
			return false
		}
		mods = append(mods, m)
	}
	return inDesiredOrder(mods)
}

// ownLine returns the module of a line ipvs-guard writes after its header:
// a bare module name, or a module commented out as not in the kernel.
func ownLine(l string) (string, bool) {
	if c, ok := strings.CutPrefix(l, "# "); ok {
		m, rel, ok := strings.Cut(c, staleMark)
		if !ok || hostfs.ValidKernelRelease(rel) != nil {
			return "", false
		}
		return m, ownModule(m)
	}
	return l, ownModule(l)
}

// ownModule reports whether ipvs-guard can declare m: one of the base
// modules, a scheduler's module, or a conntrack module; written as
// Normalize writes it.
func ownModule(m string) bool {
	switch {
	case contains(baseModules, m), m == ConntrackModule, m == ConntrackIPv4Module:
		return true
	}
	s, ok := strings.CutPrefix(m, "ip_vs_")
	return ok && s != "" && ValidateScheduler(s) == nil && Normalize(m) == m
}

// inDesiredOrder reports whether mods (distinct) follow Desired's order for
// one scheduler: base modules in their order, at most one other scheduler
// module after them, at most one conntrack module last.
func inDesiredOrder(mods []string) bool {
	// rank: the base modules 0-3, another scheduler 4, conntrack 5.
	last, sched, conntrack := -1, 0, 0
	for _, m := range mods {
		r := 4
		for i, b := range baseModules {
			if m == b {
				r = i
			}
		}
		if m == ConntrackModule || m == ConntrackIPv4Module {
			r = 5
			conntrack++
		} else if r == 4 {
			sched++
		}
		if r <= last || sched > 1 || conntrack > 1 {
			return false
		}
		last = r
	}
	return true
}

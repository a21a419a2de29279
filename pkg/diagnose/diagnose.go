// SPDX-License-Identifier: Apache-2.0

// Package diagnose runs every check once and renders the report of
// `ipvs-guard diagnose` (text or JSON) with its exit code. It owns the report
// format and the exit-code contract of DESIGN §8; it never decides what a
// check finds, and changes nothing itself (a checker built with remediation
// enabled may).
package diagnose

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// Exit codes of `ipvs-guard diagnose`.
const (
	// ExitHealthy: no check is problem or error.
	ExitHealthy = 0
	// ExitProblem: at least one check found a problem.
	ExitProblem = 1
	// ExitError: no problem found, but at least one check could not run.
	ExitError = 2
)

// Report is the outcome of one diagnose run.
type Report struct {
	// Healthy is true when no check is problem or error.
	Healthy bool `json:"healthy"`
	// Node is the node name (or hostname) the report is about.
	Node string `json:"node"`
	// Kernel is the kernel release the checks looked at.
	Kernel string `json:"kernel"`
	// Checks are the results, in the order the checks ran.
	Checks []check.Result `json:"checks"`
	// Error, when set, says why no check ran (a usage error, an unreadable
	// --kubeconfig): Checks is then empty and the exit code ExitError.
	Error string `json:"error,omitempty"`
	// Usage marks Error as a usage error: a flag or argument no run can use.
	Usage bool `json:"usage,omitempty"`
}

// Failed returns the report of a run that stopped before any check ran,
// because of err (usage: a usage error). Healthy is false.
func Failed(node string, err error, usage bool) Report {
	return Report{Node: node, Checks: []check.Result{}, Error: err.Error(), Usage: usage}
}

// Run runs each checker once, in order, and assembles the report. When ctx
// ends (SIGTERM, SIGINT) it returns at once, whatever a check is doing: the
// check running and those not yet run are errors saying so, the one
// running with what it had changed on the node until then (its Actions:
// "changed:" in the text report, "actions" in JSON). A check left running
// is abandoned to the process's exit; the only write one makes (the
// declaration file) is an atomic rename, never half done.
func Run(ctx context.Context, node, kernel string, checkers []check.Checker) Report {
	r := Report{Node: node, Kernel: kernel, Checks: make([]check.Result, 0, len(checkers))}
	for _, c := range checkers {
		res, err := check.Bound(c).Run(ctx)
		if err != nil {
			res = check.Errored(c.Name(), err)
		}
		if res.Name == "" {
			res.Name = c.Name()
		}
		r.Checks = append(r.Checks, normalize(res))
	}
	r.Healthy = r.ExitCode() == ExitHealthy
	return r
}

// normalize makes empty lists render as [] in JSON.
func normalize(r check.Result) check.Result {
	if r.Findings == nil {
		r.Findings = []check.Finding{}
	}
	if r.Remediation == nil {
		r.Remediation = []string{}
	}
	return r
}

// ExitCode returns the exit code the report calls for: 1 when any check found
// a problem (even if another errored), else 2 when any check errored or no
// check ran (Error), else 0.
func (r Report) ExitCode() int {
	if r.Error != "" {
		return ExitError
	}
	code := ExitHealthy
	for _, c := range r.Checks {
		switch c.Status {
		case check.StatusProblem:
			return ExitProblem
		case check.StatusError:
			code = ExitError
		}
	}
	return code
}

// WriteJSON writes the report as one indented JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encoding report: %w", err)
	}
	return nil
}

var statusLabel = map[check.Status]string{
	check.StatusOK:      "OK",
	check.StatusProblem: "PROBLEM",
	check.StatusError:   "ERROR",
	check.StatusSkipped: "SKIPPED",
}

// WriteText writes the human-readable report.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "ipvs-guard diagnose: node %s, kernel %s\n", Escape(orDash(r.Node)), Escape(orDash(r.Kernel)))
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "\n[%s] %s", statusLabel[c.Status], Escape(c.Name))
		if c.Reason != "" {
			fmt.Fprintf(&b, " (%s)", Escape(c.Reason))
		}
		b.WriteString("\n")
		if c.Message != "" {
			writeIndented(&b, "  ", c.Message)
		}
		for _, f := range c.Findings {
			writeIndented(&b, "  - ", f.String())
		}
		if len(c.Actions) > 0 {
			b.WriteString("  changed:\n")
			for _, a := range c.Actions {
				writeIndented(&b, "    ", a)
			}
		}
		if len(c.Remediation) > 0 {
			b.WriteString("  fix:\n")
			for _, s := range c.Remediation {
				writeIndented(&b, "    ", s)
			}
		}
	}
	verdict := map[int]string{
		ExitHealthy: "healthy",
		ExitProblem: "problems found",
		ExitError:   "some checks could not run",
	}[r.ExitCode()]
	fmt.Fprintf(&b, "\nresult: %s\n", verdict)
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	return nil
}

// writeIndented writes s with prefix on the first line and matching spaces
// on the others, each line escaped (see Escape).
func writeIndented(b *strings.Builder, prefix, s string) {
	pad := strings.Repeat(" ", len(prefix))
	for i, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if i == 0 {
			b.WriteString(prefix)
		} else {
			b.WriteString(pad)
		}
		b.WriteString(Escape(line))
		b.WriteString("\n")
	}
}

// Escape makes one line of text safe to print on a terminal: control
// characters (C0 but tab, DEL, C1: ESC, CR, NUL, …), Unicode format
// characters (bidirectional overrides, zero-width joiners) and invalid UTF-8
// are written as Go escapes (\x1b, \r, \u202e), so a file name or line
// cannot move the cursor, clear the screen or forge a report line. Text
// without them is returned unchanged.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case needsEscape(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return r == utf8.RuneError || (unicode.IsControl(r) && r != '\t') || unicode.Is(unicode.Cf, r)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

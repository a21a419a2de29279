// SPDX-License-Identifier: Apache-2.0

// Package diagnose runs every check once and renders the report of
// `ipvs-guard diagnose` (text or JSON) with its exit code. It owns the report
// format and the exit-code contract of docs/design.md §8; it never decides what a
// check finds, and changes nothing itself (a checker built with remediation
// enabled may).
package diagnose

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

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
		r.Remediation = []check.Step{}
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

// WriteText writes the human-readable report. It is the one place the text
// report is made, and every line of it is one this function writes: each
// field (node, kernel, name, reason, message, finding, action, each line of
// a remediation step) is printed as one line through [check.EscapeLine], so
// a line break or an escape sequence in outside text (a modules-load.d file
// name, a module or interface name, a scheduler from kube-proxy) shows as
// \n, \u2028 or \x1b and cannot forge a line such as "fix:".
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "ipvs-guard diagnose: node %s, kernel %s\n", check.EscapeLine(orDash(r.Node)), check.EscapeLine(orDash(r.Kernel)))
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "\n[%s] %s", statusLabel[c.Status], check.EscapeLine(c.Name))
		if c.Reason != "" {
			fmt.Fprintf(&b, " (%s)", check.EscapeLine(c.Reason))
		}
		b.WriteString("\n")
		if c.Message != "" {
			writeLines(&b, "  ", c.Message)
		}
		for _, f := range c.Findings {
			writeLines(&b, "  - ", f.String())
		}
		if len(c.Actions) > 0 {
			b.WriteString("  changed:\n")
			for _, a := range c.Actions {
				writeLines(&b, "    ", a)
			}
		}
		if len(c.Remediation) > 0 {
			b.WriteString("  fix:\n")
			for _, s := range c.Remediation {
				writeLines(&b, "    ", s...)
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

// writeLines writes each line escaped (see [check.EscapeLine]), the first
// after prefix and the others after as many spaces.
func writeLines(b *strings.Builder, prefix string, lines ...string) {
	pad := strings.Repeat(" ", len(prefix))
	for i, line := range lines {
		if i == 0 {
			b.WriteString(prefix)
		} else {
			b.WriteString(pad)
		}
		b.WriteString(check.EscapeLine(line))
		b.WriteString("\n")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// SPDX-License-Identifier: Apache-2.0

package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// forgeries are outside strings (file, module, interface names, a
// scheduler from kube-proxy) that try to start a line of their own.
var forgeries = []string{
	"a\nfix: rm -rf /.conf",
	"a\rfix: rm -rf /.conf",
	"a\r\nfix: rm -rf /.conf",
	"a\u2028fix: rm -rf /.conf",
	"a\u2029fix: rm -rf /.conf",
	"a\u0085fix: rm -rf /.conf",
	"a\vfix: rm -rf /.conf",
	"a\ffix: rm -rf /.conf",
	"a\x1b[1A\x1b[2K\rfix: rm -rf /.conf",
	"a\x1bEfix: rm -rf /.conf", // ESC E: NEL as an escape sequence
	"a\xff\nfix: rm -rf /.conf",
}

// checkLines asserts the line structure of r's text report: it has exactly
// the lines the renderer writes for r's fields (one per field, one per line
// of a remediation step), each starting with the renderer's own prefix, and
// no character that a terminal takes as a line break or a cursor move.
func checkLines(t *testing.T, r Report, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("text report is not valid UTF-8:\n%q", out)
	}
	for _, c := range out {
		if (c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7f && c <= 0x9f) || c == '\u2028' || c == '\u2029' {
			t.Fatalf("character %U in the text report:\n%s", c, out)
		}
	}
	// The lines the renderer writes, by prefix.
	want := []string{"ipvs-guard diagnose: node "}
	for _, c := range r.Checks {
		want = append(want, "", "["+statusLabel[c.Status]+"] ")
		if c.Message != "" {
			want = append(want, "  ")
		}
		for range c.Findings {
			want = append(want, "  - ")
		}
		if len(c.Actions) > 0 {
			want = append(want, "  changed:")
			for range c.Actions {
				want = append(want, "    ")
			}
		}
		if len(c.Remediation) > 0 {
			want = append(want, "  fix:")
			for _, s := range c.Remediation {
				for range s {
					want = append(want, "    ")
				}
			}
		}
	}
	want = append(want, "", "result: ")
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("text report has %d lines, the renderer wrote %d:\n%s", len(got), len(want), out)
	}
	for i, line := range got {
		if !strings.HasPrefix(line, want[i]) || (want[i] == "" && line != "") {
			t.Errorf("line %d %q does not start with %q:\n%s", i+1, line, want[i], out)
		}
	}
}

func hostileReport(s string) Report {
	return Report{Node: s, Kernel: s, Checks: []check.Result{{
		Name: s, Status: check.StatusProblem, Reason: s,
		Message:     "Stale declaration: nf_conntrack_ipv4 is declared in /etc/modules-load.d/" + s,
		Findings:    []check.Finding{lineFinding{Item: s}},
		Actions:     []string{"wrote " + s},
		Remediation: []check.Step{{"Remove it from " + s}, {"file:", s, "ip_vs"}},
	}}}
}

func TestWriteTextForgesNoLine(t *testing.T) {
	for _, s := range forgeries {
		t.Run(strings.ToValidUTF8(s, "?"), func(t *testing.T) {
			r := hostileReport(s)
			var b strings.Builder
			if err := r.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			checkLines(t, r, b.String())
			for _, line := range strings.Split(b.String(), "\n") {
				if strings.HasPrefix(strings.TrimLeft(line, " -"), "fix: rm") {
					t.Errorf("forged line %q:\n%s", line, b.String())
				}
			}
		})
	}
}

func TestWriteTextEscapesEverything(t *testing.T) {
	r := Report{Node: "n\x1b]0;x\x07", Kernel: "6.1", Checks: []check.Result{{
		Name: "modules", Status: check.StatusProblem, Reason: "R\r",
		Message:     "file /etc/modules-load.d/\x1b[1A\x1b[2K[OK] modules.conf",
		Findings:    []check.Finding{lineFinding{Item: "ip_vs\x00: stale"}},
		Actions:     []string{"wrote \x1b[31m"},
		Remediation: []check.Step{{"line one", "line\rtwo\nthree"}},
	}}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	checkLines(t, r, out)
	for _, want := range []string{`\x1b[1A`, `ip_vs\x00`, `line\rtwo\nthree`, `R\r`, `n\x1b]0;x\a`} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// FuzzWriteText: whatever the outside strings, the text report has exactly
// the renderer's lines.
func FuzzWriteText(f *testing.F) {
	for _, s := range forgeries {
		f.Add(s, s, "ip_vs")
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		r := hostileReport(a)
		r.Kernel = b
		r.Checks[0].Findings = append(r.Checks[0].Findings, lineFinding{Item: c})
		r.Checks[0].Remediation = append(r.Checks[0].Remediation, check.Step{b, c}, check.Step{c})
		r.Checks = append(r.Checks, check.Result{Name: c, Status: check.StatusOK, Message: b})
		var out strings.Builder
		if err := r.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		checkLines(t, r, out.String())
	})
}

func TestRunReturnsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stuck := check.Func{CheckName: "modules", Fn: func(context.Context) (check.Result, error) {
		select {} // a check that ignores its context
	}}
	time.AfterFunc(50*time.Millisecond, cancel)
	done := make(chan Report, 1)
	go func() { done <- Run(ctx, "n1", "6.1.0", []check.Checker{stuck, fixed("ipvs", check.StatusOK)}) }()
	select {
	case r := <-done:
		if len(r.Checks) != 2 || r.Checks[0].Status != check.StatusError || !strings.Contains(r.Checks[0].Message, "interrupted") ||
			r.Checks[1].Status != check.StatusError || !strings.Contains(r.Checks[1].Message, "not run") {
			t.Errorf("report after cancel: %+v", r.Checks)
		}
		if r.ExitCode() != ExitError {
			t.Errorf("exit code %d, want %d", r.ExitCode(), ExitError)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// TestInterruptedReportSaysWhatWasDone: a check interrupted after it changed
// the node reports those changes, in the text report ("changed:") and in
// -o json ("actions"); the run still exits 2 (could not check).
func TestInterruptedReportSaysWhatWasDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	fixing := check.Func{CheckName: "modules", Fn: func(ctx context.Context) (check.Result, error) {
		check.Record(ctx, "wrote /etc/modules-load.d/ipvs.conf: declared ip_vs")
		check.Record(ctx, "loaded ip_vs")
		cancel() // SIGTERM arrives
		<-release
		return check.Result{Status: check.StatusOK}, nil
	}}
	r := Run(ctx, "n1", "6.1.0", []check.Checker{fixing, fixed("ipvs", check.StatusOK)})
	if r.ExitCode() != ExitError {
		t.Errorf("exit code %d, want %d", r.ExitCode(), ExitError)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Checks []struct {
			Status  string
			Message string
			Actions []string
		}
	}
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	want := []string{"wrote /etc/modules-load.d/ipvs.conf: declared ip_vs", "loaded ip_vs"}
	if c := rep.Checks[0]; c.Status != "error" || !slices.Equal(c.Actions, want) ||
		!strings.Contains(c.Message, "interrupted (context canceled) after: wrote /etc/modules-load.d/ipvs.conf: declared ip_vs; loaded ip_vs") {
		t.Errorf("JSON report of the interrupted check: %+v", c)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "  changed:\n    wrote /etc/modules-load.d/ipvs.conf: declared ip_vs\n    loaded ip_vs\n") {
		t.Errorf("text report:\n%s", text.String())
	}
}

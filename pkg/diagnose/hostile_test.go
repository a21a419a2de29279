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

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

func TestEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ip_vs: loaded", "ip_vs: loaded"},
		{"tab\tkept", "tab\tkept"},
		{"x\x1b[2J\x1b[H[OK] forged", `x\x1b[2J\x1b[H[OK] forged`},
		{"ip_vs\x00", `ip_vs\x00`},
		{"lone\rCR", `lone\rCR`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"bad \xff utf8", `bad \xff utf8`},
		{"ünïcödé ok", "ünïcödé ok"},
		{"del\x7f c1\u0085", `del\x7f c1\u0085`},
	}
	for _, tt := range tests {
		if got := Escape(tt.in); got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWriteTextEscapesEverything(t *testing.T) {
	r := Report{Node: "n\x1b]0;x\x07", Kernel: "6.1", Checks: []check.Result{{
		Name: "modules", Status: check.StatusProblem, Reason: "R\r",
		Message:     "file /etc/modules-load.d/\x1b[1A\x1b[2K[OK] modules.conf",
		Findings:    []check.Finding{lineFinding{Item: "ip_vs\x00: stale"}},
		Actions:     []string{"wrote \x1b[31m"},
		Remediation: []string{"line one\nline\rtwo"},
	}}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, c := range out {
		if c < 0x20 && c != '\n' && c != '\t' {
			t.Fatalf("control character %q in the text report:\n%s", c, out)
		}
	}
	for _, want := range []string{`\x1b[1A`, `ip_vs\x00`, `line\rtwo`, `R\r`, `n\x1b]0;x\a`} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
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

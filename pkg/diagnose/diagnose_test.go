// SPDX-License-Identifier: Apache-2.0

package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

type lineFinding struct {
	Item string `json:"item"`
}

func (f lineFinding) String() string { return f.Item }

func (lineFinding) State() check.State { return check.State{} }

func fixed(name string, st check.Status) check.Checker {
	return check.Func{CheckName: name, Fn: func(context.Context) (check.Result, error) {
		return check.Result{Status: st, Reason: "R" + string(st), Message: name + " says " + string(st)}, nil
	}}
}

func failing(name string) check.Checker {
	return check.Func{CheckName: name, Fn: func(context.Context) (check.Result, error) {
		return check.Result{}, errors.New("netlink: operation not permitted")
	}}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name     string
		checkers []check.Checker
		want     int
	}{
		{"no checks", nil, ExitHealthy},
		{"all ok", []check.Checker{fixed("a", check.StatusOK), fixed("b", check.StatusOK)}, ExitHealthy},
		{"skipped is healthy", []check.Checker{fixed("a", check.StatusOK), fixed("b", check.StatusSkipped)}, ExitHealthy},
		{"problem", []check.Checker{fixed("a", check.StatusProblem), fixed("b", check.StatusOK)}, ExitProblem},
		{"error only", []check.Checker{fixed("a", check.StatusOK), failing("b")}, ExitError},
		{"problem wins over error", []check.Checker{failing("a"), fixed("b", check.StatusProblem)}, ExitProblem},
		{"error status result", []check.Checker{fixed("a", check.StatusError)}, ExitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Run(context.Background(), "n1", "6.1.0", tt.checkers)
			if got := r.ExitCode(); got != tt.want {
				t.Errorf("ExitCode() = %d, want %d", got, tt.want)
			}
			if r.Healthy != (tt.want == ExitHealthy) {
				t.Errorf("Healthy = %v with exit code %d", r.Healthy, tt.want)
			}
		})
	}
}

func TestRunErrorBecomesErrorResult(t *testing.T) {
	r := Run(context.Background(), "n1", "6.1.0", []check.Checker{failing("ipvs")})
	got := r.Checks[0]
	if got.Name != "ipvs" || got.Status != check.StatusError || !strings.Contains(got.Message, "operation not permitted") {
		t.Fatalf("unexpected result %+v", got)
	}
}

func TestWriteJSONShape(t *testing.T) {
	r := Run(context.Background(), "n1", "6.1.0-56-amd64", []check.Checker{
		check.Func{CheckName: "modules", Fn: func(context.Context) (check.Result, error) {
			return check.Result{Status: check.StatusProblem, Reason: "ModulesNotLoaded", Message: "m",
				Findings: []check.Finding{lineFinding{"ip_vs"}}, Remediation: check.Steps("fix it")}, nil
		}},
		fixed("arp", check.StatusSkipped),
	})
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, buf.String())
	}
	want := map[string]any{
		"healthy": false, "node": "n1", "kernel": "6.1.0-56-amd64",
		"checks": []any{
			map[string]any{"name": "modules", "status": "problem", "reason": "ModulesNotLoaded", "message": "m",
				"findings": []any{map[string]any{"item": "ip_vs"}}, "remediation": []any{"fix it"}},
			map[string]any{"name": "arp", "status": "skipped", "reason": "Rskipped", "message": "arp says skipped",
				"findings": []any{}, "remediation": []any{}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON report (-want +got):\n%s", diff)
	}
}

func TestWriteText(t *testing.T) {
	r := Run(context.Background(), "n1", "6.1.0", []check.Checker{
		check.Func{CheckName: "modules", Fn: func(context.Context) (check.Result, error) {
			return check.Result{Status: check.StatusProblem, Reason: "ModulesNotLoaded", Message: "two modules are missing",
				Findings:    []check.Finding{lineFinding{"ip_vs not loaded"}, lineFinding{"ip_vs_rr not loaded"}},
				Remediation: []check.Step{{"file:", "ip_vs", "ip_vs_rr"}}}, nil
		}},
	})
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	want := `ipvs-guard diagnose: node n1, kernel 6.1.0

[PROBLEM] modules (ModulesNotLoaded)
  two modules are missing
  - ip_vs not loaded
  - ip_vs_rr not loaded
  fix:
    file:
    ip_vs
    ip_vs_rr

result: problems found
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("text report (-want +got):\n%s", diff)
	}
}

// SPDX-License-Identifier: Apache-2.0

package check

import (
	"encoding/json"
	"testing"
)

func TestEscapeLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ip_vs: loaded", "ip_vs: loaded"},
		{"tab\tkept", "tab\tkept"},
		{"x\x1b[2J\x1b[H[OK] forged", `x\x1b[2J\x1b[H[OK] forged`},
		{"ip_vs\x00", `ip_vs\x00`},
		{"a\nfix: rm -rf /.conf", `a\nfix: rm -rf /.conf`},
		{"lone\rCR", `lone\rCR`},
		{"vt\vff\f", `vt\vff\f`},
		{"nel\u0085fix:", `nel\u0085fix:`},
		{"ls\u2028fix: ps\u2029", `ls\u2028fix: ps\u2029`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"bad \xff utf8", `bad \xff utf8`},
		{"ünïcödé ok", "ünïcödé ok"},
		{"del\x7f c1\u009b", `del\x7f c1\u009b`},
	}
	for _, tt := range tests {
		if got := EscapeLine(tt.in); got != tt.want {
			t.Errorf("EscapeLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStepJSON(t *testing.T) {
	steps := []Step{{"one line"}, {"file:", "ip_vs", "ip_vs_rr"}}
	b, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	if want := `["one line","file:\nip_vs\nip_vs_rr"]`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back []Step
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if JoinSteps(back, "|") != "one line|file:|ip_vs|ip_vs_rr" {
		t.Errorf("decoded %q", back)
	}
}

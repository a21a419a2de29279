// SPDX-License-Identifier: Apache-2.0

package check

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Step is one remediation step as the lines it is shown in: a sentence or a
// command is one line, a file's content or a YAML snippet several. The
// producer splits a step into lines; a line holds no line break of its own,
// and where outside text (a file name, a module name, a scheduler read from
// kube-proxy) still brings one, the text report escapes it (see
// [EscapeLine]), so it can never start a line of the report. In JSON a step
// is one string, its lines joined with "\n".
type Step []string

// Steps returns one single-line step per sentence.
func Steps(lines ...string) []Step {
	out := make([]Step, len(lines))
	for i, l := range lines {
		out[i] = Step{l}
	}
	return out
}

// String joins the step's lines with "\n".
func (s Step) String() string { return strings.Join(s, "\n") }

// MarshalJSON renders the step as one string (docs/design.md §8: "remediation": [str]).
func (s Step) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(s.String())
	if err != nil {
		return nil, fmt.Errorf("encoding remediation step: %w", err)
	}
	return b, nil
}

// UnmarshalJSON reads a step written by MarshalJSON.
func (s *Step) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("decoding remediation step: %w", err)
	}
	*s = strings.Split(str, "\n")
	return nil
}

// JoinSteps joins every line of every step with sep.
func JoinSteps(steps []Step, sep string) string {
	var lines []string
	for _, s := range steps {
		lines = append(lines, s...)
	}
	return strings.Join(lines, sep)
}

// EscapeLine makes a string safe to print as one line of a terminal report:
// every control character but tab (C0 with LF, CR, VT, FF and ESC; DEL; C1
// with NEL U+0085), the Unicode line and paragraph separators (U+2028,
// U+2029), Unicode format characters (bidirectional overrides, zero-width
// joiners) and invalid UTF-8 are written as Go escapes (\n, \x1b, \u2028,
// \xff). The result holds no line break and nothing that moves the cursor,
// so outside text cannot forge a line. Text without them is returned
// unchanged.
func EscapeLine(s string) string {
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
	return r == utf8.RuneError || (unicode.IsControl(r) && r != '\t') ||
		unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

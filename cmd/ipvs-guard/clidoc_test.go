// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestCLIDocListsEveryFlag: docs/cli.md names every flag each command
// registers (`--name` in backquotes) in that command's section, and every
// global (klog) flag under "Every command".
func TestCLIDocListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	section := func(title string) string {
		i := strings.Index(doc, "\n### "+title+"\n")
		if i < 0 {
			t.Fatalf("docs/cli.md has no section %q", title)
		}
		rest := doc[i+len(title)+6:]
		if j := strings.Index(rest, "\n#"); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	root := newRootCommand()
	for _, cmd := range root.Commands() {
		if cmd.Name() == "version" || cmd.Name() == "help" || cmd.Name() == "completion" {
			continue
		}
		text := section("`ipvs-guard " + cmd.Name() + "`")
		cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			if !strings.Contains(text, "`--"+f.Name+"`") {
				t.Errorf("docs/cli.md does not name %s's flag --%s in its section", cmd.Name(), f.Name)
			}
			if f.Shorthand != "" && !strings.Contains(text, "`-"+f.Shorthand+"`") {
				t.Errorf("docs/cli.md does not name %s's flag -%s in its section", cmd.Name(), f.Shorthand)
			}
		})
	}
	every := section("Every command")
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(every, "`--"+f.Name+"`") && !strings.Contains(every, "(`--"+f.Name+"`") {
			t.Errorf("docs/cli.md does not name the global flag --%s under \"Every command\"", f.Name)
		}
	})
}

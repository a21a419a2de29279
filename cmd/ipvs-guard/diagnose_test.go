// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runCLI runs the root command with args and returns stdout and the exit code.
func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	var ee exitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.code
	default:
		return out.String() + err.Error(), 2
	}
}

func copyTestTree(t *testing.T, tree string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("..", "..", "pkg", "modules", "testdata", tree))); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestDiagnoseModulesCLI(t *testing.T) {
	t.Run("problem exit 1 and nothing written without --fix", func(t *testing.T) {
		dir := copyTestTree(t, "debian12")
		out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1")
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("diagnose without --fix wrote the declaration file")
		}
	})
	t.Run("unknown scheduler is a finding", func(t *testing.T) {
		dir := copyTestTree(t, "ubuntu2404")
		out, code := runCLI(t, "diagnose", "--root", dir, "--scheduler", "nosuch", "-o", "json")
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		var rep struct {
			Checks []struct {
				Name     string
				Reason   string
				Findings []map[string]any
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		var found bool
		for _, f := range rep.Checks[0].Findings {
			if f["module"] == "ip_vs_nosuch" {
				found = true
				if f["available"] != false {
					t.Errorf("ip_vs_nosuch available = %v", f["available"])
				}
			}
		}
		if rep.Checks[0].Name != "modules" || rep.Checks[0].Reason != "ModuleNotInKernel" || !found {
			t.Errorf("report: %s", out)
		}
	})
	t.Run("unreadable proc modules exits 2", func(t *testing.T) {
		dir := copyTestTree(t, "debian12")
		p := filepath.Join(dir, "proc/modules")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := runCLI(t, "diagnose", "--root", dir)
		if code != 2 {
			t.Fatalf("exit %d, want 2:\n%s", code, out)
		}
	})
	t.Run("fix repairs a stale owned file and exits 0", func(t *testing.T) {
		dir := copyTestTree(t, "rocky8")
		out, code := runCLI(t, "diagnose", "--root", dir, "--fix")
		if code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, out)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
		if !bytes.Contains(b, []byte("# nf_conntrack_ipv4  # ipvs-guard: not in kernel 4.18.0-553.el8_10.x86_64\n")) {
			t.Errorf("file not repaired:\n%s", b)
		}
	})
}

// TestDiagnoseTextForgedFileName: a modules-load.d file whose name carries a
// line break or an escape sequence shows in the report (it declares a stale
// module) without starting a line of its own. (A file name holds no "/",
// so the forged command reads "rm -rf ~.conf".)
func TestDiagnoseTextForgedFileName(t *testing.T) {
	for _, name := range []string{
		"a\nfix: rm -rf ~.conf",
		"a\rfix: rm -rf ~.conf",
		"a\u2028fix: rm -rf ~.conf",
		"a\u0085fix: rm -rf ~.conf",
		"a\x1b[2K\rfix: rm -rf ~.conf",
		"a\x1bEfix: rm -rf ~.conf",
	} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			dir := copyTestTree(t, "debian12")
			if err := os.WriteFile(filepath.Join(dir, "etc/modules-load.d", name), []byte("nf_conntrack_ipv4\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1")
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			if !strings.Contains(out, "nf_conntrack_ipv4") || !strings.Contains(out, "fix: rm -rf") {
				t.Fatalf("the report does not name the stale declaration and its file:\n%s", out)
			}
			for i, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimLeft(line, " -"), "fix: rm") {
					t.Errorf("line %d forged by the file name: %q", i+1, line)
				}
				if strings.ContainsAny(line, "\r\x1b\u2028\u0085") {
					t.Errorf("line %d carries a raw line break or escape: %q", i+1, line)
				}
			}
		})
	}
}

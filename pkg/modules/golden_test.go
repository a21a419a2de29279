// SPDX-License-Identifier: Apache-2.0

package modules_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/diagnose"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestDiagnoseGolden renders the diagnose report (text and JSON) of the
// modules check over each captured host tree and compares it with
// testdata/golden. Regenerate with: go test ./pkg/modules -run Golden -update
func TestDiagnoseGolden(t *testing.T) {
	tests := []struct {
		name      string
		tree      string
		scheduler string
		wantExit  int
	}{
		{name: "debian12-rr", tree: "debian12", wantExit: diagnose.ExitProblem},
		{name: "debian12-lc", tree: "debian12", scheduler: "lc", wantExit: diagnose.ExitProblem},
		{name: "debian12-nosuch", tree: "debian12", scheduler: "nosuch", wantExit: diagnose.ExitProblem},
		{name: "rocky8-rr", tree: "rocky8", wantExit: diagnose.ExitProblem},
		{name: "centos7-rr", tree: "centos7", wantExit: diagnose.ExitProblem},
		{name: "ubuntu2404-lc", tree: "ubuntu2404", scheduler: "lc", wantExit: diagnose.ExitProblem},
		{name: "ubuntu2404-healthy", tree: "ubuntu2404-healthy", scheduler: "lc", wantExit: diagnose.ExitHealthy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", tc.tree)
			if tc.tree == "ubuntu2404-healthy" {
				dir = healthyUbuntu(t)
			}
			root := hostfs.New(dir)
			kernel, err := root.KernelRelease()
			if err != nil {
				t.Fatal(err)
			}
			c := modules.NewChecker(modules.Config{Root: root, Scheduler: tc.scheduler})
			rep := diagnose.Run(context.Background(), "node-1", kernel, []check.Checker{c})
			if got := rep.ExitCode(); got != tc.wantExit {
				t.Errorf("exit code = %d, want %d", got, tc.wantExit)
			}
			var txt, js bytes.Buffer
			if err := rep.WriteText(&txt); err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", "golden", tc.name+".txt"), txt.Bytes())
			compareGolden(t, filepath.Join("testdata", "golden", tc.name+".json"), js.Bytes())
		})
	}
}

// healthyUbuntu copies the ubuntu2404 tree and drops the stale /etc/modules line.
func healthyUbuntu(t *testing.T) string {
	t.Helper()
	dir := modules.CopyTree(t, "ubuntu2404")
	if err := os.WriteFile(filepath.Join(dir, "etc/modules"), []byte("# /etc/modules: kernel modules to load at boot time.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (regenerate with -update): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the chart README")

const chartDir = "../../deploy/ipvs-guard"

// TestREADMEUpToDate is the diff check for the generated chart README.
func TestREADMEUpToDate(t *testing.T) {
	got, err := generate(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(chartDir, "README.md")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is stale; run `make chart-docs` (-committed +generated):\n%s", path, diff)
	}
}

func TestGenerate(t *testing.T) {
	tests := []struct {
		name    string
		values  string
		want    []string
		wantErr string
	}{
		{
			name:   "leaves, nested keys and multi-line comments",
			values: "image:\n  # -- Image repository.\n  repository: example/x\n# -- Tolerations,\n# one per line.\ntolerations:\n  - operator: Exists\n# -- Port.\nport: 9473\n",
			want: []string{
				"| image.repository | string | `\"example/x\"` | Image repository. |",
				"| tolerations | list | `[{\"operator\":\"Exists\"}]` | Tolerations, one per line. |",
				"| port | int | `9473` | Port. |",
			},
		},
		{
			name:    "an undocumented leaf is an error",
			values:  "image:\n  repository: example/x\n",
			wantErr: "image.repository (line 2) has no `# --` comment",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("name: x\nversion: 1.0.0\nappVersion: 1.0.0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(tt.values), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := generate(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(got), w) {
					t.Errorf("README lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guestvm"
)

func TestStagePayload(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "kube-proxy")
	if err := os.WriteFile(src, []byte("bin"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		files   []string
		want    map[string]os.FileMode
		wantErr string
	}{
		{"default mode", []string{src + ":/usr/local/bin/kube-proxy"}, map[string]os.FileMode{"usr/local/bin/kube-proxy": 0o755}, ""},
		{"explicit mode", []string{src + ":/guest/e2e-lib.sh:0644"}, map[string]os.FileMode{"guest/e2e-lib.sh": 0o644}, ""},
		{"no guest path", []string{src}, nil, "want SRC:GUESTPATH"},
		{"bad mode", []string{src + ":/x:rwx"}, nil, "mode"},
		{"missing source", []string{filepath.Join(dir, "nope") + ":/x"}, nil, "no such file"},
	}
	t.Setenv("GUEST_IPVS_GUARD_BIN", "")
	t.Setenv("CI", "true")
	t.Setenv("GUEST_ENV_PASS", "E2E_X")
	t.Setenv("E2E_X", "y")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := guestvm.NewPayload(filepath.Join(t.TempDir(), "p"), "/dev/null", "/dev/null")
			if err != nil {
				t.Fatal(err)
			}
			err = stagePayload(p, tt.files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for f, mode := range tt.want {
				fi, err := os.Stat(filepath.Join(p.Dir, f))
				if err != nil || fi.Mode().Perm() != mode {
					t.Errorf("%s: %v, %v; want mode %v", f, fi, err, mode)
				}
			}
			env, err := os.ReadFile(filepath.Join(p.Dir, "guest", "env"))
			if err != nil {
				t.Fatal(err)
			}
			if want := "export CI='true'\nexport IPVS_GUARD_BIN='/usr/local/bin/ipvs-guard'\nexport E2E_X='y'\n"; string(env) != want {
				t.Errorf("env %q, want %q", env, want)
			}
		})
	}
}

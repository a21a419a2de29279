// SPDX-License-Identifier: Apache-2.0

package hostfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPath(t *testing.T) {
	tests := []struct {
		name string
		root string
		in   string
		want string
	}{
		{"empty root", "", "/proc/modules", "/proc/modules"},
		{"slash root", "/", "/proc/modules", "/proc/modules"},
		{"prefixed", "/host", "/proc/modules", "/host/proc/modules"},
		{"relative input", "/host", "etc/modules", "/host/etc/modules"},
		{"dot-dot stays under root", "/host", "/../etc", "/host/etc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := New(tt.root).Path(tt.in); got != tt.want {
				t.Errorf("Path(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestKernelRelease(t *testing.T) {
	tests := []struct {
		name    string
		content *string
		want    string
		wantErr bool
	}{
		{"debian", ptr("6.1.0-56-amd64\n"), "6.1.0-56-amd64", false},
		{"missing", nil, "", true},
		{"empty", ptr("\n"), "", true},
		{"path traversal", ptr("../../etc\n"), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.content != nil {
				p := filepath.Join(dir, "proc/sys/kernel/osrelease")
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := New(dir).KernelRelease()
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("KernelRelease() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func ptr(s string) *string { return &s }

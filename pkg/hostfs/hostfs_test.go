// SPDX-License-Identifier: Apache-2.0

package hostfs

import (
	"os"
	"path/filepath"
	"strings"
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
		{"dot", ptr(".\n"), "", true},
		{"two lines", ptr("6.1.0-56-amd64\n6.1.0-57-amd64\n"), "", true},
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

func TestValidKernelRelease(t *testing.T) {
	tests := []struct {
		rel string
		ok  bool
	}{
		{"6.1.0-56-amd64", true},
		{"5.14.0-427.13.1.el9_4.x86_64", true},
		{"6.8.0-1012-aws+", true},
		{".", false},
		{"..", false},
		{"6.1.0\n6.2.0", false},
		{"../x", false},
		{"a b", false},
		{strings.Repeat("1", 65), false},
		{"", false},
	}
	for _, tt := range tests {
		if err := ValidKernelRelease(tt.rel); (err == nil) != tt.ok {
			t.Errorf("ValidKernelRelease(%q) = %v, want ok %v", tt.rel, err, tt.ok)
		}
	}
}

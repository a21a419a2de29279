// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://192.0.2.1:6443
    certificate-authority: pki/ca.crt
users:
- name: u
  user:
    token: secret
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`

func TestRESTConfigFromKubeconfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(good, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pki", "ca.crt"), []byte("not checked here"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 64<<20); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("{not yaml: ["), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantErr error  // errors.Is
		wantMsg string // in the error
	}{
		{"named pipe", fifo, hostfs.ErrNotRegular, "named pipe"},
		{"/dev/zero", "/dev/zero", hostfs.ErrNotRegular, "character device"},
		{"directory", dir, syscall.EISDIR, dir},
		{"huge file", huge, hostfs.ErrTooLarge, "4 MiB limit for a kubeconfig"},
		{"missing file", filepath.Join(dir, "nosuch"), fs.ErrNotExist, "nosuch"},
		{"not a kubeconfig", garbage, nil, garbage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := RESTConfigFromKubeconfig(tt.path); done <- err }()
			select {
			case err := <-done:
				t.Log(err)
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("RESTConfigFromKubeconfig(%s) = %v, want %v naming %q", tt.path, err, tt.wantErr, tt.wantMsg)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("RESTConfigFromKubeconfig(%s) still reading after 5 s", tt.path)
			}
		})
	}
	t.Run("a kubeconfig, relative paths from its directory", func(t *testing.T) {
		t.Chdir(dir)
		cfg, err := RESTConfigFromKubeconfig("kubeconfig")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://192.0.2.1:6443" || cfg.BearerToken != "secret" || cfg.TLSClientConfig.CAFile != filepath.Join(dir, "pki", "ca.crt") {
			t.Errorf("config: host %q, token %q, CA file %q", cfg.Host, cfg.BearerToken, cfg.TLSClientConfig.CAFile)
		}
	})
}

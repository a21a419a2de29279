// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
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
	fifo, huge := badFiles(t, dir)
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
		if cfg.Host != "https://192.0.2.1:6443" || cfg.BearerToken != "secret" || string(cfg.TLSClientConfig.CAData) != "not checked here" || cfg.TLSClientConfig.CAFile != "" {
			t.Errorf("config: host %q, token %q, CA data %q, CA file %q", cfg.Host, cfg.BearerToken, cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile)
		}
	})
}

// kubeconfigNaming returns a kubeconfig whose current context's cluster and
// user name files by the given fields (certificate-authority,
// client-certificate, client-key, tokenFile).
func kubeconfigNaming(files map[string]string) string {
	var cluster, user strings.Builder
	for _, f := range []string{"certificate-authority"} {
		if p, ok := files[f]; ok {
			fmt.Fprintf(&cluster, "    %s: %q\n", f, p)
		}
	}
	for _, f := range []string{"client-certificate", "client-key", "tokenFile"} {
		if p, ok := files[f]; ok {
			fmt.Fprintf(&user, "    %s: %q\n", f, p)
		}
	}
	if user.Len() == 0 {
		user.WriteString("    token: static\n")
	}
	return "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://192.0.2.1:6443\n" + cluster.String() +
		"users:\n- name: u\n  user:\n" + user.String() +
		// Files of a context not in use are not read (clientcmd ignores them too).
		"- name: other\n  user:\n    tokenFile: /dev/zero\n" +
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\n- name: o\n  context: {cluster: c, user: other}\ncurrent-context: c\n"
}

// TestKubeconfigReferencedFiles: every file the kubeconfig's current context
// names is read as the kubeconfig is (a regular file, bounded, never
// blocking), and a bad one is an error naming the field and the file.
func TestKubeconfigReferencedFiles(t *testing.T) {
	dir := t.TempDir()
	good := map[string]string{
		"certificate-authority": "pki/ca.crt",
		"client-certificate":    "pki/client.crt",
		"client-key":            "pki/client.key",
		"tokenFile":             "pki/token",
	}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	for f, p := range good {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(f+" content\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fifo, huge := badFiles(t, dir)
	bad := []struct {
		name    string
		path    string
		wantErr error
		wantMsg string
	}{
		{"named pipe", fifo, hostfs.ErrNotRegular, "named pipe"},
		{"/dev/zero", "/dev/zero", hostfs.ErrNotRegular, "character device"},
		{"directory", dir, syscall.EISDIR, dir},
		{"huge file", huge, hostfs.ErrTooLarge, "4 MiB limit for a "},
		{"missing file, relative to the kubeconfig", "pki/nosuch", fs.ErrNotExist, "KCDIR/pki/nosuch"},
	}
	for _, field := range []string{"certificate-authority", "client-certificate", "client-key", "tokenFile"} {
		for _, b := range bad {
			t.Run(field+"/"+b.name, func(t *testing.T) {
				files := maps.Clone(good)
				files[field] = b.path
				kc := filepath.Join(t.TempDir(), "kubeconfig")
				// Relative names are relative to the kubeconfig's directory.
				if err := os.Symlink(filepath.Join(dir, "pki"), filepath.Join(filepath.Dir(kc), "pki")); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(kc, []byte(kubeconfigNaming(files)), 0o600); err != nil {
					t.Fatal(err)
				}
				wantMsg := strings.ReplaceAll(b.wantMsg, "KCDIR", filepath.Dir(kc))
				done := make(chan error, 1)
				go func() { _, err := RESTConfigFromKubeconfig(kc); done <- err }()
				select {
				case err := <-done:
					if err == nil || !errors.Is(err, b.wantErr) || !strings.Contains(err.Error(), wantMsg) ||
						!strings.Contains(err.Error(), "kubeconfig "+kc+": "+field+": ") {
						t.Errorf("err = %v, want %v naming the kubeconfig, %s and %q", err, b.wantErr, field, wantMsg)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("still reading %s after 5 s", field)
				}
			})
		}
	}

	t.Run("every file inlined, relative to the kubeconfig", func(t *testing.T) {
		kc := filepath.Join(dir, "kubeconfig-files")
		if err := os.WriteFile(kc, []byte(kubeconfigNaming(good)), 0o600); err != nil {
			t.Fatal(err)
		}
		old := tokenFileReread
		tokenFileReread = 0 // read the token file on every request
		defer func() { tokenFileReread = old }()
		cfg, err := RESTConfigFromKubeconfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		tls := cfg.TLSClientConfig
		if string(tls.CAData) != "certificate-authority content\n" || string(tls.CertData) != "client-certificate content\n" ||
			string(tls.KeyData) != "client-key content\n" || tls.CAFile != "" || tls.CertFile != "" || tls.KeyFile != "" ||
			cfg.BearerToken != "" || cfg.BearerTokenFile != "" {
			t.Errorf("client-go would read files itself: %+v token %q token file %q", tls, cfg.BearerToken, cfg.BearerTokenFile)
		}
		auth := func() string {
			t.Helper()
			var got string
			rt := cfg.WrapTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
				got = r.Header.Get("Authorization")
				return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
			}))
			req, _ := http.NewRequest(http.MethodGet, "https://192.0.2.1:6443/api", nil)
			if _, err := rt.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
			return got
		}
		if got := auth(); got != "Bearer tokenFile content" {
			t.Errorf("Authorization = %q", got)
		}
		// A rotated token is followed, through the same bounded reader.
		if err := os.WriteFile(filepath.Join(dir, "pki/token"), []byte("rotated\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := auth(); got != "Bearer rotated" {
			t.Errorf("after rotation Authorization = %q", got)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// badFiles makes, in dir, a named pipe and a sparse 64 MiB file: what a
// bounded, regular-file-only read must refuse without blocking.
func badFiles(t *testing.T, dir string) (fifo, huge string) {
	t.Helper()
	fifo = filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge = filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 64<<20); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	return fifo, huge
}

// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func writeTestKubeconfig(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q}
users:
- name: u
  user: {token: t}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`, server)
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoaderRules: --kubeconfig, else the first existing file of
// $KUBECONFIG, else in-cluster when KUBERNETES_SERVICE_HOST and _PORT are
// set, else ErrNoConfig; a named file that cannot be used is an error,
// never a fallback.
func TestLoaderRules(t *testing.T) {
	flagKC := writeTestKubeconfig(t, "https://flag.example:6443")
	envKC := writeTestKubeconfig(t, "https://env.example:6443")
	missing := filepath.Join(t.TempDir(), "nosuch")
	dir := t.TempDir()
	inCluster := func() (*rest.Config, error) { return &rest.Config{Host: "https://10.96.0.1:443"}, nil }
	noToken := func() (*rest.Config, error) {
		return nil, &fs.PathError{Op: "open", Path: "/var/run/secrets/kubernetes.io/serviceaccount/token", Err: fs.ErrNotExist}
	}
	badCA := func() (*rest.Config, error) { return nil, errors.New("expected to load root CA config") }
	pod := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name      string
		explicit  string
		env       map[string]string
		inCluster func() (*rest.Config, error)
		wantHost  string
		wantKind  string
		wantErr   string
		noConfig  bool
	}{
		{name: "flag wins over everything", explicit: flagKC, env: with(pod, "KUBECONFIG", envKC), inCluster: inCluster, wantHost: "https://flag.example:6443", wantKind: "--kubeconfig"},
		{name: "$KUBECONFIG before in-cluster", env: with(pod, "KUBECONFIG", envKC), inCluster: inCluster, wantHost: "https://env.example:6443", wantKind: "$KUBECONFIG"},
		{name: "$KUBECONFIG list: first existing file", env: map[string]string{"KUBECONFIG": missing + string(os.PathListSeparator) + envKC}, wantHost: "https://env.example:6443", wantKind: "$KUBECONFIG"},
		{name: "$KUBECONFIG naming no existing file falls to in-cluster", env: with(pod, "KUBECONFIG", missing), inCluster: inCluster, wantHost: "https://10.96.0.1:443", wantKind: "in-cluster"},
		{name: "in-cluster", env: pod, inCluster: inCluster, wantHost: "https://10.96.0.1:443", wantKind: "in-cluster"},
		{name: "nothing", env: map[string]string{}, inCluster: inCluster, noConfig: true},
		{name: "only KUBERNETES_SERVICE_HOST", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, inCluster: inCluster, noConfig: true},
		{name: "a pod without a mounted token", env: pod, inCluster: noToken, noConfig: true},
		{name: "in-cluster fails otherwise", env: pod, inCluster: badCA, wantErr: "in-cluster configuration: expected to load root CA"},
		{name: "flag naming a missing file", explicit: missing, env: pod, inCluster: inCluster, wantErr: "no such file"},
		{name: "$KUBECONFIG naming a directory", env: with(pod, "KUBECONFIG", dir), inCluster: inCluster, wantErr: "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Loader{Getenv: func(k string) string { return tt.env[k] }, InCluster: tt.inCluster}
			cfg, origin, err := l.Load(tt.explicit)
			switch {
			case tt.noConfig:
				if !errors.Is(err, ErrNoConfig) {
					t.Fatalf("Load = %v, want ErrNoConfig", err)
				}
				return
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.Is(err, ErrNoConfig) {
					t.Fatalf("Load = %v, want an error with %q", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if cfg.Host != tt.wantHost || origin.Kind != tt.wantKind {
				t.Errorf("Load = %s from %s, want %s from %s", cfg.Host, origin, tt.wantHost, tt.wantKind)
			}
		})
	}
}

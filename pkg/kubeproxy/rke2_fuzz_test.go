// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// FuzzRKE2Mode feeds RKE2's config.yaml, a drop-in and the kube-proxy
// static pod arbitrary bytes: the mode source returns a mode or an error,
// never panics.
func FuzzRKE2Mode(f *testing.F) {
	man, err := os.ReadFile("testdata/rke2/kube-proxy-nftables.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("kube-proxy-arg:\n  - proxy-mode=nftables\n"), []byte("kube-proxy-arg+: [proxy-mode=ipvs]\n"), man)
	f.Add([]byte("kube-proxy-arg: proxy-mode=ipvs,x=y\n"), []byte(""), []byte("spec: {containers: [{name: kube-proxy, command: [kube-proxy, --config=/x]}]}"))
	f.Add([]byte("kube-proxy-arg: [1, null, {a: b}]\n"), []byte("kube-proxy-arg: 7\n"), []byte("{}"))
	f.Fuzz(func(t *testing.T, cfg, dropin, manifest []byte) {
		dir := t.TempDir()
		for p, b := range map[string][]byte{RKE2ConfigFile: cfg, RKE2ConfigFile + ".d/10-x.yaml": dropin, RKE2KubeProxyManifest: manifest} {
			full := filepath.Join(dir, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ev, err := RKE2Mode(hostfs.New(dir)).Read(context.Background())
		if err == nil && ev.Mode == "" {
			t.Errorf("no error and no mode with both files present")
		}
	})
}

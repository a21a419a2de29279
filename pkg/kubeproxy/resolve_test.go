// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

// rke2Tree writes files (host path → content) under a new root.
func rke2Tree(t *testing.T, files map[string]string) hostfs.Root {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hostfs.New(dir)
}

func manifest(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/rke2", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRKE2Mode reads RKE2's config.yaml, its drop-ins (merged as k3s's
// configfilearg merges them: a key replaces, a key ending in "+" appends)
// and the rendered kube-proxy static pod.
func TestRKE2Mode(t *testing.T) {
	const cfg, dropins, man = RKE2ConfigFile, RKE2ConfigFile + ".d/", RKE2KubeProxyManifest
	for _, tc := range []struct {
		name  string
		files map[string]string
		mode  string
		err   string
	}{
		{"nothing", nil, "", ""},
		{"config list and manifest agree", map[string]string{cfg: "token: x\nkube-proxy-arg:\n  - proxy-mode=nftables\n", man: manifest(t, "kube-proxy-nftables.yaml")}, ModeNFTables, ""},
		{"config string", map[string]string{cfg: "kube-proxy-arg: proxy-mode=nftables\n"}, ModeNFTables, ""},
		{"config with dashes", map[string]string{cfg: "kube-proxy-arg: [\"--proxy-mode=ipvs\", \"ipvs-scheduler=lc\"]\n"}, ModeIPVS, ""},
		{"config without proxy-mode is iptables", map[string]string{cfg: "write-kubeconfig-mode: \"0644\"\n"}, ModeIPTables, ""},
		{"config with --config tells nothing", map[string]string{cfg: "kube-proxy-arg: config=/etc/kp.yaml\n"}, "", "--config file and no proxy-mode"},
		{"manifest alone", map[string]string{man: manifest(t, "kube-proxy-ipvs.yaml")}, ModeIPVS, ""},
		{"manifest of an older RKE2 (flags in command)", map[string]string{man: manifest(t, "kube-proxy-ipvs-command.yaml")}, ModeIPVS, ""},
		{"manifest without --proxy-mode is iptables", map[string]string{man: manifest(t, "kube-proxy-default.yaml")}, ModeIPTables, ""},
		{"drop-in replaces", map[string]string{
			cfg:                     "kube-proxy-arg: [proxy-mode=ipvs]\n",
			dropins + "50-nft.yaml": "kube-proxy-arg: [proxy-mode=nftables]\n",
		}, ModeNFTables, ""},
		{"drop-in appends with +, the last flag wins", map[string]string{
			cfg:                       "kube-proxy-arg: [proxy-mode=ipvs, ipvs-strict-arp=true]\n",
			dropins + "50-nft.yml":    "kube-proxy-arg+: [proxy-mode=nftables]\n",
			dropins + "40-other.yaml": "kube-proxy-arg+: metrics-bind-address=0.0.0.0:10249\n",
		}, ModeNFTables, ""},
		{"drop-ins in name order", map[string]string{
			dropins + "10-a.yaml": "kube-proxy-arg: [proxy-mode=nftables]\n",
			dropins + "20-b.yaml": "kube-proxy-arg: [proxy-mode=ipvs]\n",
		}, ModeIPVS, ""},
		{"a drop-in replacing without proxy-mode resets it", map[string]string{
			cfg:                   "kube-proxy-arg: [proxy-mode=ipvs]\n",
			dropins + "10-a.yaml": "kube-proxy-arg: [v=2]\n",
		}, ModeIPTables, ""},
		{"not yaml or yml is ignored", map[string]string{
			cfg:                    "kube-proxy-arg: [proxy-mode=nftables]\n",
			dropins + "x.yaml.bak": "kube-proxy-arg: [proxy-mode=ipvs]\n",
		}, ModeNFTables, ""},
		{"config changed since RKE2's start", map[string]string{cfg: "kube-proxy-arg: [proxy-mode=nftables]\n", man: manifest(t, "kube-proxy-ipvs.yaml")}, "", "RKE2 not restarted since the change?"},
		{"bad yaml", map[string]string{cfg: "kube-proxy-arg: [\n"}, "", "parsing"},
		{"bad manifest", map[string]string{man: "spec: [\n"}, "", "parsing the kube-proxy manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := RKE2Mode(rke2Tree(t, tc.files)).Read(context.Background())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Mode != tc.mode {
				t.Errorf("mode %q (%s), want %q", ev.Mode, ev.Detail, tc.mode)
			}
		})
	}
}

func TestModeFromArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		mode string
		ok   bool
	}{
		{nil, ModeIPTables, true},
		{[]string{"--proxy-mode=ipvs", "--proxy-mode=nftables"}, ModeNFTables, true},
		{[]string{"proxy-mode=IPVS"}, ModeIPVS, true},
		{[]string{"proxy-mode=nftables,ipvs-strict-arp=true"}, ModeNFTables, true},
		{[]string{"--config=/x"}, "", false},
		{[]string{"--config=/x", "--proxy-mode=ipvs"}, ModeIPVS, true},
	} {
		mode, ok := ModeFromArgs(tc.args)
		if mode != tc.mode || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.args, mode, ok, tc.mode, tc.ok)
		}
	}
}

func TestModeFromKernel(t *testing.T) {
	for _, tc := range []struct {
		s    KernelState
		mode string
	}{
		{KernelState{NFTablesTable: true}, ModeNFTables},
		{KernelState{DummyInterface: true}, ModeIPVS},
		{KernelState{NFTablesTable: true, DummyInterface: true}, ""},
		{KernelState{}, ""},
	} {
		if ev := ModeFromKernel(tc.s); ev.Mode != tc.mode || ev.Detail == "" {
			t.Errorf("%+v: %+v, want mode %q and a detail", tc.s, ev, tc.mode)
		}
	}
}

// TestResolveModeOrder: the first source that tells wins; the ones before
// it say why they did not.
func TestResolveModeOrder(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Data:       map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"},
	})
	root := rke2Tree(t, nil)
	r := ResolveMode(context.Background(), RKE2Mode(root), ConfigMapMode(kubetest.FromClientset(cs), nil), KernelMode(func() (KernelState, error) { return KernelState{DummyInterface: true}, nil }))
	if r.Mode != ModeNFTables || r.Source != SourceConfigMap {
		t.Errorf("got %+v, want nftables from the ConfigMap", r)
	}
	r = ResolveMode(context.Background(), RKE2Mode(root), ConfigMapMode(kubetest.FromClientset(fake.NewClientset()), nil), KernelMode(func() (KernelState, error) { return KernelState{}, nil }))
	if r.Known() || r.String() != "node configuration: no RKE2 config.yaml or kube-proxy static pod; kube-proxy ConfigMap: no kube-system/kube-proxy ConfigMap; kernel state: neither a kube-proxy nftables table nor kube-ipvs0" {
		t.Errorf("got %+v: %s", r, r)
	}
}

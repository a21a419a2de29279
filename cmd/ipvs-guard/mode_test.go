// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// fakeKubeProxy serves /proxyMode and /configz as kube-proxy does, in the
// mode held by the returned value (changeable between runs).
func fakeKubeProxy(t *testing.T, mode string) (addr string, set func(string)) {
	t.Helper()
	var cur atomic.Value
	cur.Store(mode)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := cur.Load().(string)
		switch r.URL.Path {
		case "/proxyMode":
			fmt.Fprint(w, m)
		case "/configz":
			fmt.Fprintf(w, `{"kubeproxy.config.k8s.io":{"mode":%q,"ipvs":{"scheduler":"","strictARP":false}}}`, m)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), func(m string) { cur.Store(m) }
}

// treeSnapshot maps every path under dir to its mode and content.
func treeSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		v := info.Mode().String()
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += string(b)
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type modeReport struct {
	Checks []struct {
		Name    string
		Status  string
		Reason  string
		Message string
		Actions []string
	}
}

func parseModeReport(t *testing.T, out string) modeReport {
	t.Helper()
	var rep modeReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	return rep
}

// TestDiagnoseFixNotInIPVSMode: on a node whose kube-proxy is configured
// for and runs in nftables (or iptables) mode, diagnose --fix loads
// nothing, writes nothing, and every IPVS check says IPVSNotInUse; exit 0.
// Switched back to ipvs, the prerequisites apply again.
func TestDiagnoseFixNotInIPVSMode(t *testing.T) {
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			dir := copyTestTree(t, "debian12")
			shipNFTablesModules(t, dir)
			addr, set := fakeKubeProxy(t, mode)
			before := treeSnapshot(t, dir)
			out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1", "--fix", "-o", "json", "--kube-proxy-metrics-address", addr)
			rep := parseModeReport(t, out)
			// The fake kube-proxy says nftables (iptables) mode and this host
			// holds no kube-proxy table (chains): the nftables-dataplane
			// check's problem is real, and the only one allowed.
			wantCode := 0
			missing := map[string]string{"nftables": "NFTablesTableMissing", "iptables": "IPTablesChainsMissing"}[mode]
			for _, c := range rep.Checks {
				if c.Status != string(check.StatusProblem) {
					continue
				}
				if c.Name == check.NameNFTablesDataplane && c.Reason == missing {
					wantCode = 1
					continue
				}

				t.Errorf("check %s: %s %s %q; want no problem", c.Name, c.Status, c.Reason, c.Message)
			}
			if code != wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, wantCode, out)
			}
			want := map[string]bool{check.NameModules: true, check.NameKubeProxy: true, check.NameIPVS: true, check.NameARPSysctls: true}
			for _, c := range rep.Checks {
				if !want[c.Name] {
					continue
				}
				delete(want, c.Name)
				if c.Status != string(check.StatusSkipped) || c.Reason != check.ReasonIPVSNotInUse || !strings.Contains(c.Message, mode+" mode") || len(c.Actions) > 0 {
					t.Errorf("check %s: status %s reason %s actions %q message %q; want skipped %s naming %s", c.Name, c.Status, c.Reason, c.Actions, c.Message, check.ReasonIPVSNotInUse, mode)
				}
			}
			if len(want) > 0 {
				t.Errorf("checks missing from the report: %v\n%s", want, out)
			}
			after := treeSnapshot(t, dir)
			for p, v := range after {
				if before[p] != v {
					t.Errorf("diagnose --fix changed %s", p)
				}
			}
			for p := range before {
				if _, ok := after[p]; !ok {
					t.Errorf("diagnose --fix removed %s", p)
				}
			}

			// Back to IPVS: the modules are demanded (and declared) again.
			set("ipvs")
			out, _ = runCLI(t, "diagnose", "--root", dir, "--node-name", "n1", "--fix", "-o", "json", "--kube-proxy-metrics-address", addr)
			rep = parseModeReport(t, out)
			if rep.Checks[0].Name != check.NameModules || rep.Checks[0].Reason == check.ReasonIPVSNotInUse {
				t.Errorf("back in ipvs mode, modules check %+v", rep.Checks[0])
			}
			if _, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); err != nil {
				t.Errorf("back in ipvs mode, --fix did not declare the modules: %v", err)
			}
		})
	}
}

// TestDiagnoseKubeProxyUnreachable: with kube-proxy's metrics port
// refusing connections, the node's own configuration tells the mode: RKE2's
// config.yaml saying ipvs demands the IPVS modules; config.yaml and the
// rendered static pod saying nftables make --fix load and write nothing;
// nothing telling the mode makes --fix report and write nothing, and say
// why; the operator's --assume-proxy-mode ipvs lets it fix.
func TestDiagnoseKubeProxyUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	const rke2Config = "etc/rancher/rke2/config.yaml"
	const rke2Manifest = "var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml"
	nftManifest, err := os.ReadFile("../../pkg/kubeproxy/testdata/rke2/kube-proxy-nftables.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		files    map[string]string // written into the tree; "" removes
		args     []string
		exit     int
		reason   string
		message  string
		declared bool
	}{
		{"rke2 config says ipvs", nil, nil, 1, "ModulesNotLoaded", "kube-proxy not reachable at " + addr + ": configured for ipvs mode (node configuration: ", false},
		{"rke2 config and manifest say nftables", map[string]string{
			rke2Config:   "kube-proxy-arg:\n  - proxy-mode=nftables\n",
			rke2Manifest: string(nftManifest),
		}, []string{"--fix"}, 0, check.ReasonIPVSNotInUse, "kube-proxy not reachable at " + addr + ": configured for nftables mode (node configuration: ", false},
		{"nothing tells", map[string]string{rke2Config: ""}, []string{"--fix"}, 1, "ModulesNotLoaded",
			"kube-proxy's mode is not known yet: kube-proxy not reachable at " + addr + "; node configuration: no RKE2 config.yaml or kube-proxy static pod", false},
		{"nothing tells, --assume-proxy-mode ipvs", map[string]string{rke2Config: ""}, []string{"--fix", "--assume-proxy-mode", "ipvs"}, 1, "ModulesNotLoaded",
			"kube-proxy not reachable at " + addr + ": assuming it is configured for ipvs mode (--assume-proxy-mode)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyTestTree(t, "debian12")
			for p, c := range tc.files {
				full := filepath.Join(dir, p)
				if c == "" {
					if err := os.Remove(full); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := append([]string{"diagnose", "--root", dir, "--node-name", "n1", "-o", "json", "--kube-proxy-metrics-address", addr}, tc.args...)
			out, code := runCLI(t, args...)
			if code != tc.exit {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.exit, out)
			}
			m := parseModeReport(t, out).Checks[0]
			if m.Name != check.NameModules || m.Reason != tc.reason || !strings.Contains(m.Message, tc.message) {
				t.Errorf("modules check %+v\nwant reason %s, message containing %q", m, tc.reason, tc.message)
			}
			_, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
			if declared := err == nil; declared != tc.declared {
				t.Errorf("ipvs.conf written: %v, want %v (actions %q)", declared, tc.declared, m.Actions)
			}
			if !tc.declared && len(m.Actions) > 0 || tc.declared && len(m.Actions) == 0 {
				t.Errorf("actions %q, want some: %v", m.Actions, tc.declared)
			}
		})
	}
}

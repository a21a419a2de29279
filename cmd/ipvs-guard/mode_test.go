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
			addr, set := fakeKubeProxy(t, mode)
			before := treeSnapshot(t, dir)
			out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1", "--fix", "-o", "json", "--kube-proxy-metrics-address", addr)
			if code != 0 {
				t.Fatalf("exit %d, want 0:\n%s", code, out)
			}
			rep := parseModeReport(t, out)
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

// TestDiagnoseKubeProxyUnreachableAssumesIPVS: with kube-proxy's metrics
// port refusing connections, the modules check demands the IPVS modules as
// before and says what it assumed.
func TestDiagnoseKubeProxyUnreachableAssumesIPVS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := copyTestTree(t, "debian12")
	out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1", "-o", "json", "--kube-proxy-metrics-address", addr)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	m := parseModeReport(t, out).Checks[0]
	if m.Name != check.NameModules || m.Status != string(check.StatusProblem) || !strings.Contains(m.Message, "kube-proxy not reachable at "+addr+": assuming IPVS mode") {
		t.Errorf("modules check %+v", m)
	}
}

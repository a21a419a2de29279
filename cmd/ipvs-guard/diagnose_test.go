// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/hosttreetest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// runCLI runs the root command with args and returns stdout and the exit code.
func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	var ee exitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.code
	default:
		return out.String() + err.Error(), 2
	}
}

func copyTestTree(t *testing.T, tree string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("..", "..", "pkg", "modules", "testdata", tree))); err != nil {
		t.Fatal(err)
	}
	return dst
}

// shipNFTablesModules lists in the captured tree's modules.dep the
// nf_tables modules kube-proxy's nftables rules need that it lacks (the
// trees hold IPVS's closure only), as a stock kernel ships them: the
// nftables-prerequisites check then judges a tree whose kernel can run
// nftables mode.
func shipNFTablesModules(t *testing.T, root string) {
	t.Helper()
	if err := hosttreetest.ShipNFTables(root, false); err != nil {
		t.Fatal(err)
	}
}

func TestDiagnoseModulesCLI(t *testing.T) {
	t.Run("problem exit 1 and nothing written without --fix", func(t *testing.T) {
		dir := copyTestTree(t, "debian12")
		out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1")
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("diagnose without --fix wrote the declaration file")
		}
	})
	t.Run("unknown scheduler is a finding", func(t *testing.T) {
		dir := copyTestTree(t, "ubuntu2404")
		out, code := runCLI(t, "diagnose", "--root", dir, "--scheduler", "nosuch", "-o", "json")
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		var rep struct {
			Checks []struct {
				Name     string
				Reason   string
				Findings []map[string]any
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		var found bool
		for _, f := range rep.Checks[0].Findings {
			if f["module"] == "ip_vs_nosuch" {
				found = true
				if f["available"] != false {
					t.Errorf("ip_vs_nosuch available = %v", f["available"])
				}
			}
		}
		if rep.Checks[0].Name != "modules" || rep.Checks[0].Reason != "ModuleNotInKernel" || !found {
			t.Errorf("report: %s", out)
		}
	})
	t.Run("unreadable proc modules exits 2", func(t *testing.T) {
		dir := copyTestTree(t, "debian12")
		p := filepath.Join(dir, "proc/modules")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := runCLI(t, "diagnose", "--root", dir)
		if code != 2 {
			t.Fatalf("exit %d, want 2:\n%s", code, out)
		}
	})
	t.Run("fix repairs a stale owned file and exits 0", func(t *testing.T) {
		dir := copyTestTree(t, "rocky8")
		out, code := runCLI(t, "diagnose", "--root", dir, "--fix", "--assume-proxy-mode", "ipvs")
		if code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, out)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "etc/modules-load.d/ipvs.conf"))
		if !bytes.Contains(b, []byte("# nf_conntrack_ipv4  # ipvs-guard: not in kernel 4.18.0-553.el8_10.x86_64\n")) {
			t.Errorf("file not repaired:\n%s", b)
		}
	})
}

// TestProbeIPUsageErrors: a --probe-ip no single host answers for is a
// usage error (exit 2) found before anything is read or written, in
// diagnose (even with --fix) and in run.
func TestProbeIPUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		ip   string
	}{
		{"IPv4 broadcast", "255.255.255.255"},
		{"IPv4 all-hosts multicast", "224.0.0.1"},
		{"SSDP multicast", "239.255.255.250"},
		{"IPv6 all-nodes multicast", "ff02::1"},
		{"IPv6 site-local multicast", "ff05::2"},
		{"IPv4 unspecified", "0.0.0.0"},
		{"IPv4 this network", "0.0.0.1"},
		{"IPv4 this network, high", "0.255.255.254"},
		{"IPv6 unspecified", "::"},
		{"IPv4 loopback", "127.0.0.1"},
		{"IPv6 loopback", "::1"},
		{"one bad among good ones", "192.0.2.10,224.0.0.251"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTestTree(t, "debian12")
			out, code := runCLI(t, "diagnose", "--root", dir, "--fix", "--probe-ip", tt.ip)
			if code != 2 || !strings.Contains(out, "--probe-ip") {
				t.Errorf("diagnose: exit %d, want 2 and a --probe-ip error:\n%s", code, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "etc/modules-load.d/ipvs.conf")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("diagnose --fix wrote the declaration file after a usage error")
			}
			out, code = runCLI(t, "run", "--root", dir, "--node-name", "n1", "--probe-ip", tt.ip)
			if code != 2 || !strings.Contains(out, "--probe-ip") {
				t.Errorf("run: exit %d, want 2 and a --probe-ip error:\n%s", code, out)
			}
		})
	}
}

// TestKubeconfigNotARegularFile: a --kubeconfig naming a named pipe, a
// device, a directory, a huge or a missing file is a clear error, exit 2,
// at once (clientcmd alone would hang on the pipe and run out of memory on
// /dev/zero), in diagnose and in run.
func TestKubeconfigNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil { // sparse
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"named pipe", fifo, "it is a named pipe"},
		{"/dev/zero", "/dev/zero", "it is a character device"},
		{"directory", dir, "is a directory"},
		{"huge file", huge, "4 MiB limit for a kubeconfig"},
		{"missing file", filepath.Join(dir, "nosuch"), "no such file or directory"},
	}
	root := copyTestTree(t, "debian12")
	for _, tt := range tests {
		for _, cmd := range []string{"diagnose", "run"} {
			t.Run(tt.name+"/"+cmd, func(t *testing.T) {
				type result struct {
					out  string
					code int
				}
				done := make(chan result, 1)
				go func() {
					args := []string{cmd, "--root", root, "--node-name", "n1", "--kubeconfig", tt.path}
					if cmd == "run" {
						args = append(args, "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0")
					}
					out, code := runCLI(t, args...)
					done <- result{out, code}
				}()
				select {
				case r := <-done:
					if r.code != 2 || !strings.Contains(r.out, "--kubeconfig") || !strings.Contains(r.out, tt.want) {
						t.Errorf("exit %d, want 2 and an error with %q:\n%s", r.code, tt.want, r.out)
					}
				case <-time.After(10 * time.Second):
					if tt.path == fifo { // let the blocked reader go
						if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
							f.Close()
						}
					}
					t.Fatalf("%s --kubeconfig %s still running after 10 s", cmd, tt.path)
				}
			})
		}
	}
}

// TestDiagnoseSilentKubeProxyCostsOneTimeout: several checks read
// kube-proxy's metrics port; one that accepts connections and never
// answers costs one request timeout in all, not one per read.
func TestDiagnoseSilentKubeProxyCostsOneTimeout(t *testing.T) {
	dir := copyTestTree(t, "debian12")
	start := time.Now()
	out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1", "--kube-proxy-metrics-address", blackhole(t))
	took := time.Since(start)
	t.Logf("diagnose took %s", took.Round(time.Millisecond))
	if code != 1 || !strings.Contains(out, "did not answer") && !strings.Contains(out, "timeout") {
		t.Errorf("exit %d, want 1 with the kube-proxy check's error:\n%s", code, out)
	}
	if limit := kubeproxy.DefaultTimeout + time.Second; took > limit {
		t.Errorf("diagnose took %s with a silent kube-proxy, want under %s (one timeout)", took.Round(time.Millisecond), limit)
	}
}

// TestDiagnoseTextForgedFileName: a modules-load.d file whose name carries a
// line break or an escape sequence shows in the report (it declares a stale
// module) without starting a line of its own. (A file name holds no "/",
// so the forged command reads "rm -rf ~.conf".)
func TestDiagnoseTextForgedFileName(t *testing.T) {
	for _, name := range []string{
		"a\nfix: rm -rf ~.conf",
		"a\rfix: rm -rf ~.conf",
		"a\u2028fix: rm -rf ~.conf",
		"a\u0085fix: rm -rf ~.conf",
		"a\x1b[2K\rfix: rm -rf ~.conf",
		"a\x1bEfix: rm -rf ~.conf",
	} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			dir := copyTestTree(t, "debian12")
			if err := os.WriteFile(filepath.Join(dir, "etc/modules-load.d", name), []byte("nf_conntrack_ipv4\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, code := runCLI(t, "diagnose", "--root", dir, "--node-name", "n1")
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			if !strings.Contains(out, "nf_conntrack_ipv4") || !strings.Contains(out, "fix: rm -rf") {
				t.Fatalf("the report does not name the stale declaration and its file:\n%s", out)
			}
			for i, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimLeft(line, " -"), "fix: rm") {
					t.Errorf("line %d forged by the file name: %q", i+1, line)
				}
				if strings.ContainsAny(line, "\r\x1b\u2028\u0085") {
					t.Errorf("line %d carries a raw line break or escape: %q", i+1, line)
				}
			}
		})
	}
}

// TestDiagnoseTargetMode: --target-mode nftables adds the
// nftables-readiness report to the JSON report, each finding with a kind
// and a severity; without it the report is not there; ipvs-leftovers is
// always there; an unknown mode is a usage error.
func TestDiagnoseTargetMode(t *testing.T) {
	type report struct {
		Checks []struct {
			Name     string `json:"name"`
			Status   string `json:"status"`
			Reason   string `json:"reason"`
			Findings []struct {
				Kind     string `json:"kind"`
				Severity string `json:"severity"`
				Message  string `json:"message"`
			} `json:"findings"`
		} `json:"checks"`
	}
	tests := []struct {
		name          string
		args          []string
		wantReadiness bool
		wantCode      int
	}{
		{name: "with --target-mode nftables", args: []string{"--target-mode", "nftables"}, wantReadiness: true, wantCode: 1},
		{name: "without", wantCode: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTestTree(t, "debian12")
			args := append([]string{"diagnose", "--root", dir, "--node-name", "n1", "--kube-proxy-metrics-address", "127.0.0.1:1", "-o", "json"}, tt.args...)
			out, code := runCLI(t, args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.wantCode, out)
			}
			var r report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			seen := map[string]bool{}
			for _, c := range r.Checks {
				seen[c.Name] = true
				switch c.Name {
				case "ipvs-leftovers":
					if c.Status != "skipped" || c.Reason != "IPVSInUse" {
						t.Errorf("ipvs-leftovers %s %s, want skipped IPVSInUse (kube-proxy unreachable: IPVS assumed)", c.Status, c.Reason)
					}
				case "nftables-readiness":
					if c.Status != "ok" && c.Status != "problem" {
						t.Errorf("nftables-readiness status %s", c.Status)
					}
					if len(c.Findings) == 0 {
						t.Error("nftables-readiness has no finding (kube-proxy unreachable is one)")
					}
					for _, f := range c.Findings {
						if f.Kind == "" || (f.Severity != "blocker" && f.Severity != "change" && f.Severity != "info" && f.Severity != "ok") || f.Message == "" {
							t.Errorf("finding %+v lacks kind, severity or message", f)
						}
					}
				}
			}
			if !seen["ipvs-leftovers"] {
				t.Error("no ipvs-leftovers check")
			}
			if seen["nftables-readiness"] != tt.wantReadiness {
				t.Errorf("nftables-readiness reported = %v, want %v", seen["nftables-readiness"], tt.wantReadiness)
			}
		})
	}
	out, code := runCLI(t, "diagnose", "--target-mode", "iptables")
	if code != 2 || !strings.Contains(out, "--target-mode") {
		t.Errorf("--target-mode iptables: exit %d, want 2 naming the flag:\n%s", code, out)
	}
	out, code = runCLI(t, "diagnose", "--prove-kernel")
	if code != 2 || !strings.Contains(out, "--prove-kernel needs --target-mode nftables") {
		t.Errorf("--prove-kernel alone: exit %d, want 2 naming the flag:\n%s", code, out)
	}
	out, code = runCLI(t, "diagnose", "--assume-proxy-mode", "userspace")
	if code != 2 || !strings.Contains(out, "--assume-proxy-mode") {
		t.Errorf("--assume-proxy-mode userspace: exit %d, want 2 naming the flag:\n%s", code, out)
	}
}

// TestRootFlag: an empty --root is a usage error (an unset variable must
// not mean the host); --root / stays allowed.
func TestRootFlag(t *testing.T) {
	tests := []struct {
		root    string
		wantErr bool
	}{
		{"", true},
		{"/", false},
		{"/host", false},
	}
	for _, tt := range tests {
		o := checkOptions{root: tt.root}
		err := o.validate()
		if (err != nil) != tt.wantErr || (err != nil && !strings.Contains(err.Error(), "--root")) {
			t.Errorf("validate(--root %q) = %v, want error %t", tt.root, err, tt.wantErr)
		}
	}
	out, code := runCLI(t, "run", "--root", "", "--node-name", "n1")
	if code != 2 || !strings.Contains(out, "--root is empty") {
		t.Errorf("run --root '': exit %d, want 2 naming --root:\n%s", code, out)
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// leasedModuleTree returns a copy of the debian12 tree that claims to be
// the running kernel (so --fix builds a loader for it) and whose module
// files all hold a write lease taken by this test. The remediation writes
// the declaration file first and loads modules after; its first open of a
// module file then cannot complete (a non-blocking open of a leased file
// fails with EWOULDBLOCK, which the confined open retries) until the lease
// is released, and breaks the lease, which the test sees. That is the
// moment to send SIGTERM: the write is done, nothing is loaded, and no
// module is ever loaded into this kernel (the leases last until the
// process is gone). started reports whether a module file was opened.
func leasedModuleTree(t *testing.T) (root string, started func() bool) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	running := unix.ByteSliceToString(u.Release[:])
	root = copyTestTree(t, "debian12")
	const captured = "6.1.0-56-amd64"
	if err := os.Rename(filepath.Join(root, "lib/modules", captured), filepath.Join(root, "lib/modules", running)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/sys/kernel/osrelease"), []byte(running+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "lib/modules", running)
	dep, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	sc := bufio.NewScanner(bytes.NewReader(dep))
	for sc.Scan() {
		rel, _, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		// Not a module: should the lease ever be broken, the kernel refuses it.
		if err := os.WriteFile(p, []byte("not a module\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK)
		testenv.Require(t, err == nil, "a write lease on a file under "+os.TempDir()+" (fcntl F_SETLEASE): "+errString(err))
	}
	if len(fds) == 0 {
		t.Fatal("no module files in modules.dep")
	}
	return root, func() bool {
		for _, fd := range fds {
			if l, err := unix.FcntlInt(uintptr(fd), unix.F_GETLEASE, 0); err == nil && l != unix.F_WRLCK {
				return true // being broken: someone opened it
			}
		}
		return false
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// startUntilLoading starts cmd and waits until it opens a module file,
// then sends SIGTERM and returns its exit code.
func startUntilLoading(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer, started func() bool, check func()) int {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		// Before the leases go: the process must never get past them.
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !started() {
		select {
		case err := <-done:
			t.Fatalf("exited before loading a module: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no module file opened within 30 s\n%s", out.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	check()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after SIGTERM\n%s", out.String())
	}
	return -1
}

const wantDeclared = "wrote /etc/modules-load.d/ipvs.conf: declared ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh, nf_conntrack"

// assertDeclared checks the declaration file on disk is the new one.
func assertDeclared(t *testing.T, root string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc/modules-load.d/ipvs.conf"))
	if err != nil {
		t.Fatalf("the declaration file is not written when loading starts: %v", err)
	}
	if !strings.HasPrefix(string(b), "# Kernel modules for kube-proxy in IPVS mode") || !strings.HasSuffix(string(b), "\nip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n") {
		t.Errorf("declaration file on disk:\n%s", b)
	}
}

// TestDiagnoseFixInterruptedReportsWhatItDid: SIGTERM while `diagnose
// --fix` loads modules, after it rewrote the declaration file: the report
// (text and -o json) says the modules check was interrupted after that
// write, the file holds the new content, and the exit code is 2.
func TestDiagnoseFixInterruptedReportsWhatItDid(t *testing.T) {
	bin := ipvsguardtest.Binary(t)
	for _, output := range []string{"text", "json"} {
		t.Run(output, func(t *testing.T) {
			root, started := leasedModuleTree(t)
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, "diagnose", "--root", root, "--fix", "--node-name", "n1", "-o", output,
				"--kube-proxy-metrics-address", closedPort(t))
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := startUntilLoading(t, cmd, &stderr, started, func() { assertDeclared(t, root) })
			if code != 2 {
				t.Errorf("exit %d, want 2\n%s%s", code, stdout.String(), stderr.String())
			}
			assertDeclared(t, root)
			if output == "text" {
				for _, want := range []string{
					"[ERROR] modules (CheckFailed)\n  modules check could not run: interrupted (terminated signal received) after: " + wantDeclared + "\n",
					"  changed:\n    " + wantDeclared + "\n",
				} {
					if !strings.Contains(stdout.String(), want) {
						t.Errorf("report lacks %q:\n%s", want, stdout.String())
					}
				}
				return
			}
			var rep struct {
				Healthy bool
				Checks  []struct {
					Name, Status, Message string
					Actions               []string
				}
			}
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("%v:\n%s", err, stdout.String())
			}
			if len(rep.Checks) == 0 || rep.Healthy {
				t.Fatalf("report: %s", stdout.String())
			}
			m := rep.Checks[0]
			if m.Name != "modules" || m.Status != "error" || len(m.Actions) != 1 || m.Actions[0] != wantDeclared ||
				!strings.Contains(m.Message, "interrupted (terminated signal received) after: "+wantDeclared) {
				t.Errorf("modules check in the report: %+v", m)
			}
		})
	}
}

// TestRunRemediateInterruptedLogsWhatItDid: SIGTERM while the agent
// (`run --remediate`) loads modules, after it rewrote the declaration
// file: its log says what the interrupted run had changed, and it exits 0.
func TestRunRemediateInterruptedLogsWhatItDid(t *testing.T) {
	bin := ipvsguardtest.Binary(t)
	root, started := leasedModuleTree(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "run", "--remediate", "--root", root, "--node-name", "n1",
		"--kubeconfig", writeKubeconfig(t, "https://"+closedPort(t)), "--kube-proxy-metrics-address", closedPort(t),
		"--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0", "--no-uevents")
	cmd.Stdout, cmd.Stderr = &out, &out
	code := startUntilLoading(t, cmd, &out, started, func() { assertDeclared(t, root) })
	if code != 0 {
		t.Errorf("exit %d, want 0\n%s", code, out.String())
	}
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "Check interrupted by shutdown after changing the node") {
			line = l
		}
	}
	if !strings.Contains(line, wantDeclared) {
		t.Errorf("no log line says what the interrupted remediation did:\n%s", out.String())
	}
}

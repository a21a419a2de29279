// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube/kubetest"
)

// TestHostileAPIServerBinary runs the real binary's run, diagnose and
// cleanup against an API server that streams every list without end
// (before: run grew to 1.5 GB and diagnose to 1.1 GB in 3 s, cleanup to
// 5.5 GB in 10 s and ignored SIGTERM), sends SIGTERM after 3 s if it
// still runs, and wants it gone within 5 s of the signal with a peak RSS
// under the chart's 128 MiB limit.
func TestHostileAPIServerBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary for several seconds")
	}
	bin := ipvsguardtest.Binary(t)
	root := copyTestTree(t, "debian12")
	tests := []struct {
		name string
		mode kubetest.HostileMode
		args []string
		// exits says the command ends by itself (with an error) before
		// the signal.
		exits bool
		want  string
	}{
		{name: "run, endless list", mode: kubetest.EndlessList, args: []string{"run", "--node-name", "n1", "--root", root,
			"--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0", "--no-uevents"}},
		{name: "diagnose, endless list", mode: kubetest.EndlessList, args: []string{"diagnose", "--node-name", "n1", "--root", root}},
		{name: "cleanup, endless list", mode: kubetest.EndlessList, args: []string{"cleanup"}, exits: true, want: "larger than ipvs-guard reads"},
		{name: "cleanup, same continue token", mode: kubetest.SameContinue, args: []string{"cleanup"}, exits: true, want: "repeated a continue token"},
		{name: "cleanup, continue tokens without end", mode: kubetest.FreshContinue, args: []string{"cleanup"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := kubetest.NewHostile(t, tt.mode)
			var out bytes.Buffer
			cmd := exec.Command(bin, append(tt.args, "--kubeconfig", writeKubeconfig(t, h.URL))...)
			cmd.Stdout, cmd.Stderr = &out, &out
			// As in the pod: the chart sets GOMEMLIMIT to the container's limit.
			cmd.Env = append(os.Environ(), "GOMEMLIMIT=134217728")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The child's rusage counts the test process's memory (Go
			// forks with CLONE_VM): sample the child's own high-water mark.
			var hwm atomic.Int64
			go func() {
				for {
					b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
					if err != nil {
						return
					}
					for _, line := range strings.Split(string(b), "\n") {
						if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
							if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb<<10 > hwm.Load() {
								hwm.Store(kb << 10)
							}
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
				if !tt.exits {
					t.Logf("ended before SIGTERM: %v", err)
				}
			case <-time.After(3 * time.Second):
				if tt.exits {
					t.Errorf("still running after 3 s")
				}
				sent := time.Now()
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				select {
				case err = <-done:
					took := time.Since(sent)
					t.Logf("SIGTERM to exit: %s", took.Round(time.Millisecond))
					if took > 5*time.Second {
						t.Errorf("exited %s after SIGTERM, want within 5 s", took.Round(time.Millisecond))
					}
				case <-time.After(30 * time.Second):
					_ = cmd.Process.Kill()
					<-done
					t.Fatalf("still running 30 s after SIGTERM\n%s", tail(out.String()))
				}
			}
			rss := hwm.Load()
			t.Logf("exit %v; peak RSS %.1f MiB; the server wrote %.1f MiB in %d requests", err, float64(rss)/(1<<20), float64(h.Written())/(1<<20), h.Requests())
			if rss > 128<<20 {
				t.Errorf("peak RSS %d MiB, want under 128 MiB", rss>>20)
			}
			if tt.exits {
				var ee *exec.ExitError
				if !errors.As(err, &ee) || !strings.Contains(out.String(), tt.want) {
					t.Errorf("exit %v, want an error with %q:\n%s", err, tt.want, tail(out.String()))
				}
			}
		})
	}
}

// TestCleanupHostile: cleanupNodes over a guarded client stops on a
// repeated continue token and an endless answer, and at once when its
// context ends.
func TestCleanupHostile(t *testing.T) {
	tests := []struct {
		name string
		mode kubetest.HostileMode
		want error
	}{
		{"same continue token", kubetest.SameContinue, kube.ErrContinueRepeated},
		{"endless list", kubetest.EndlessList, kube.ErrResponseTooLarge},
		{"continue tokens without end", kubetest.FreshContinue, errTooManyPages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := kubetest.NewHostile(t, tt.mode)
			cfg, _, guard, err := clusterConfig(writeKubeconfig(t, h.URL))
			if err != nil {
				t.Fatal(err)
			}
			guard.PagesLimit = -1
			cfg.QPS = -1 // 100 pages at once
			cs, err := kube.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = cleanupNodes(ctx, cs)
			if !errors.Is(err, tt.want) {
				t.Errorf("cleanupNodes = %v, want %v", err, tt.want)
			}
		})
	}
}

// tail is the end of a command's output, for a failure message.
func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// TestUnreachableAPIServerNamed: with the API server's port closed, run,
// diagnose and cleanup name the server and the dial error (diagnose's
// listing used to say only "context deadline exceeded"). The kubeconfig
// comes from $KUBECONFIG, which each command falls back to.
func TestUnreachableAPIServerNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary for several seconds")
	}
	bin := ipvsguardtest.Binary(t)
	root := copyTestTree(t, "debian12")
	addr := closedPort(t)
	kc := writeKubeconfig(t, "https://"+addr)
	for _, args := range [][]string{
		{"run", "--node-name", "n1", "--root", root, "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0", "--no-uevents"},
		{"diagnose", "--node-name", "n1", "--root", root},
		{"cleanup"},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kc)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			wait := 15 * time.Second
			if args[0] == "run" {
				wait = 3 * time.Second // its first Node read fails at once; it retries until stopped
			}
			select {
			case <-done:
			case <-time.After(wait):
				_ = cmd.Process.Signal(syscall.SIGTERM)
				<-done
			}
			for _, want := range []string{"https://" + addr + "/", "dial tcp " + addr + ": connect: connection refused"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("%s: the output does not say %q:\n%s", args[0], want, tail(out.String()))
				}
			}
		})
	}
}

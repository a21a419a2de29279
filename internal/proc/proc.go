// SPDX-License-Identifier: Apache-2.0

// Package proc runs the real components of the test tiers (MetalLB,
// Prometheus, Alertmanager, agents) as child processes in their own process
// group, each logging to a file, with SIGTERM/SIGKILL stops and a log tail
// for failure messages.
package proc

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a started component; its output goes to a log file.
type Process struct {
	// Name names it in errors and logs.
	Name string
	// Log is the file holding its stdout and stderr.
	Log string

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// Start starts cmd with its output appended to logPath.
func Start(name string, cmd *exec.Cmd, logPath string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so Kill reaches every process it starts; killed
	// with the test process should that die first.
	cmd.SysProcAttr = Attr(true)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to timeout, then kills.
func (p *Process) Stop(timeout time.Duration) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
	}
}

// Tail returns the last n bytes of the process's log (for failure messages).
func (p *Process) Tail(n int64) string {
	f, err := os.Open(p.Log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// WaitContext waits until ctx ends or the process exits; an exit is an error.
func (p *Process) WaitContext(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		_, err := p.Exited()
		return fmt.Errorf("%s exited: %v; log %s:\n%s", p.Name, err, p.Log, p.Tail(2000))
	}
}

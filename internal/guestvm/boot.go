// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/proc"
)

// ExitCrashed is Boot's exit code when the guest never reported one: a
// kernel panic, an oops (oops=panic), /init dying, or the timeout.
const ExitCrashed = 3

// exitMarker is the line /init (hack/guest/init.sh) prints last.
const exitMarker = "ipvs-guard-guest-exit"

// BootOptions configures Boot. Zero values pick defaults.
type BootOptions struct {
	// Machine is the QEMU machine; Boot adds the console, the run's nonce
	// and the guest's switches to Machine.Append and sets NoReboot.
	Machine Machine
	// Console is the file the console is captured to (required unless
	// Interactive).
	Console string
	// Stdout also receives the console unless nil.
	Stdout io.Writer
	// Filter hides kernel messages and the exit marker from Stdout.
	Filter bool
	// Interactive connects QEMU to the terminal and starts a shell instead
	// of /guest/main; Boot then returns QEMU's exit code.
	Interactive bool
	// Timeout ends the guest (SIGTERM, SIGKILL 10 s later); default 600 s.
	Timeout time.Duration
	// Log receives progress lines and, on a crash, the console's last lines.
	Log io.Writer
}

// kernelNoiseRE matches what Filter hides.
var kernelNoiseRE = regexp.MustCompile(`^` + exitMarker + ` |^\[ *[0-9]+\.[0-9]+\] `)

// Boot boots the guest, captures its console and returns the exit code
// /guest/main reported, or ExitCrashed when none came. err is set only when
// QEMU could not be run at all.
func Boot(ctx context.Context, o BootOptions) (int, error) {
	nonce, err := newNonce()
	if err != nil {
		return 0, err
	}
	m := o.Machine
	m.NoReboot = true
	m.Append = strings.TrimSpace("console=ttyS0 quiet loglevel=3 panic=-1 oops=panic ipvsguard.nonce=" + nonce + " " + m.Append)
	if m.Net {
		m.Append += " ipvsguard.net=1"
	}
	if o.Interactive {
		m.Append += " ipvsguard.shell=1"
	}
	args := m.Args()
	logf(o.Log, "booting guest (%s), console log: %s", strings.Join(Accel(), " "), o.Console)
	if o.Interactive {
		cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), nil
		}
		return 0, err
	}
	timeout := cmp.Or(o.Timeout, 600*time.Second)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	console, err := os.Create(o.Console)
	if err != nil {
		return 0, err
	}
	defer console.Close()
	cmd := exec.CommandContext(tctx, "qemu-system-x86_64", args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	// QEMU dies with this process.
	cmd.SysProcAttr = proc.Attr(false)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting qemu: %w", err)
	}
	copied := make(chan error, 1)
	go func() { copied <- copyConsole(pr, console, o.Stdout, o.Filter) }()
	waitErr := cmd.Wait()
	pw.Close()
	if err := <-copied; err != nil {
		return 0, fmt.Errorf("console: %w", err)
	}
	if err := console.Close(); err != nil {
		return 0, err
	}
	took := time.Since(start).Round(time.Second)
	raw, err := os.ReadFile(o.Console)
	if err != nil {
		return 0, err
	}
	if code, ok := ExitCode(string(raw), nonce); ok {
		logf(o.Log, "guest finished in %v with exit code %d", took, code)
		return code, nil
	}
	if tctx.Err() != nil && ctx.Err() == nil {
		logf(o.Log, "guest timed out after %v (GUEST_TIMEOUT=%d); last console lines:", took, int(timeout.Seconds()))
	} else {
		logf(o.Log, "guest ended without reporting an exit code (kernel panic, oops or /init crash; qemu: %v); last console lines:", waitErr)
	}
	if o.Log != nil {
		io.WriteString(o.Log, lastLines(string(raw), 40))
	}
	return ExitCrashed, nil
}

// copyConsole writes QEMU's output, carriage returns dropped, to the
// console file and (filtered, if asked) to out.
func copyConsole(r io.Reader, file io.Writer, out io.Writer, filter bool) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			line = strings.ReplaceAll(line, "\r", "")
			if _, werr := io.WriteString(file, line); werr != nil {
				return werr
			}
			if out != nil && (!filter || !kernelNoiseRE.MatchString(line)) {
				io.WriteString(out, line)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// ExitCode returns the exit code in the console's last exit marker for
// nonce. A marker from another run (another nonce) does not count.
func ExitCode(console, nonce string) (int, bool) {
	code, found := 0, false
	prefix := exitMarker + " " + nonce + " "
	for line := range strings.Lines(console) {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), prefix)
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			code, found = n, true
		}
	}
	return code, found
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.SplitAfter(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "") + "\n"
}

// newNonce returns 16 random hex digits that tell this run's exit marker
// from anything a test prints.
func newNonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

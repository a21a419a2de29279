// SPDX-License-Identifier: Apache-2.0

package guest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// Paths and tools the guest image provides (hack/guest/base.manifest, init.sh).
const (
	// BaselineFile lists the modules loaded before any test ran.
	BaselineFile = testenv.GuestMarkerDir + "/modules.baseline"
	// ModprobeLog collects every call of the guest's `modprobe` tripwire.
	ModprobeLog = testenv.GuestMarkerDir + "/modprobe.log"
	// KmodModprobe is kmod's real modprobe, kept off PATH so that only code
	// that asks for it by path can use it (the reference in benchmarks).
	KmodModprobe = "/usr/libexec/kmod/modprobe"
	// SystemdModulesLoad is Debian's systemd-modules-load.
	SystemdModulesLoad = "/lib/systemd/systemd-modules-load"
	// DefaultBin is where the guest image holds the ipvs-guard under test.
	DefaultBin = "/usr/local/bin/ipvs-guard"
	// ReleaseFile names the Debian release whose kernel the guest booted
	// (bullseye, bookworm, trixie; GUEST_RELEASE on the host).
	ReleaseFile = testenv.GuestMarkerDir + "/release"
)

// Release returns the Debian release whose kernel the guest booted.
func Release(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(ReleaseFile)
	if err != nil {
		t.Fatalf("reading the guest's release: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// Module is one line of /proc/modules.
type Module struct {
	Name     string
	RefCount int
	UsedBy   []string
	State    string
}

// ParseProcModules parses the content of /proc/modules.
func ParseProcModules(data []byte) ([]Module, error) {
	var mods []Module
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("parsing /proc/modules line %q: want at least 5 fields", sc.Text())
		}
		m := Module{Name: f[0], State: f[4]}
		if _, err := fmt.Sscan(f[2], &m.RefCount); err != nil {
			return nil, fmt.Errorf("parsing refcount of %s: %w", f[0], err)
		}
		if f[3] != "-" {
			for _, u := range strings.Split(strings.TrimSuffix(f[3], ","), ",") {
				if u != "" {
					m.UsedBy = append(m.UsedBy, u)
				}
			}
		}
		mods = append(mods, m)
	}
	return mods, sc.Err()
}

// LoadedModules returns the names of the modules in /proc/modules.
func LoadedModules(t testing.TB) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("/proc/modules")
	if err != nil {
		t.Fatalf("reading /proc/modules: %v", err)
	}
	mods, err := ParseProcModules(data)
	if err != nil {
		t.Fatal(err)
	}
	loaded := make(map[string]bool, len(mods))
	for _, m := range mods {
		loaded[m.Name] = true
	}
	return loaded
}

// RequireLoaded fails the test unless every named module is in /proc/modules.
func RequireLoaded(t testing.TB, names ...string) {
	t.Helper()
	loaded := LoadedModules(t)
	var missing []string
	for _, n := range names {
		if !loaded[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("modules not in /proc/modules: %s (loaded: %s)", strings.Join(missing, " "), sortedKeys(loaded))
	}
}

// RequireNotLoaded fails the test if any named module is in /proc/modules.
func RequireNotLoaded(t testing.TB, names ...string) {
	t.Helper()
	loaded := LoadedModules(t)
	var present []string
	for _, n := range names {
		if loaded[n] {
			present = append(present, n)
		}
	}
	if len(present) > 0 {
		t.Fatalf("modules unexpectedly in /proc/modules: %s", strings.Join(present, " "))
	}
}

func sortedKeys(m map[string]bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// ResetModules unloads every module that was not loaded when the guest
// started (BaselineFile), dependents before their dependencies, and fails the
// test if one cannot be removed.
func ResetModules(t testing.TB) {
	t.Helper()
	if err := resetModules(); err != nil {
		t.Fatalf("resetting kernel modules: %v", err)
	}
}

func resetModules() error {
	base, err := os.ReadFile(BaselineFile)
	if err != nil {
		return fmt.Errorf("reading baseline: %w", err)
	}
	keep := map[string]bool{}
	for _, n := range strings.Fields(string(base)) {
		keep[n] = true
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile("/proc/modules")
		if err != nil {
			return fmt.Errorf("reading /proc/modules: %w", err)
		}
		mods, err := ParseProcModules(data)
		if err != nil {
			return err
		}
		var extra []Module
		for _, m := range mods {
			if !keep[m.Name] {
				extra = append(extra, m)
			}
		}
		if len(extra) == 0 {
			return nil
		}
		removed := 0
		var errs []error
		for _, m := range extra {
			if m.RefCount != 0 || m.State != "Live" {
				continue
			}
			if err := deleteModule(m.Name); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", m.Name, err))
				continue
			}
			removed++
		}
		if removed == 0 {
			if time.Now().After(deadline) {
				names := make([]string, 0, len(extra))
				for _, m := range extra {
					names = append(names, fmt.Sprintf("%s(refs %d, used by %v, %s)", m.Name, m.RefCount, m.UsedBy, m.State))
				}
				return fmt.Errorf("cannot unload %s: %w", strings.Join(names, " "), errors.Join(errs...))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// ModprobeCalls returns the calls of the guest's `modprobe` tripwire so far.
func ModprobeCalls(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(ModprobeLog)
	if err != nil {
		t.Fatalf("reading %s: %v", ModprobeLog, err)
	}
	return strings.FieldsFunc(string(data), func(r rune) bool { return r == '\n' })
}

// ClearModprobeCalls empties the tripwire log.
func ClearModprobeCalls(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(ModprobeLog, nil, 0o644); err != nil {
		t.Fatalf("clearing %s: %v", ModprobeLog, err)
	}
}

// Bin returns the ipvs-guard binary under test ($IPVS_GUARD_BIN, else DefaultBin).
func Bin() string {
	if b := os.Getenv("IPVS_GUARD_BIN"); b != "" {
		return b
	}
	return DefaultBin
}

// Result is the outcome of one command run.
type Result struct {
	Args     []string
	Stdout   string
	Stderr   string
	ExitCode int
}

// String describes the run for failure messages.
func (r Result) String() string {
	return fmt.Sprintf("$ %s\n(exit %d)\n--- stdout\n%s--- stderr\n%s", strings.Join(r.Args, " "), r.ExitCode, r.Stdout, r.Stderr)
}

// Run runs a command with a timeout and returns its output and exit code. It
// fails the test only when the command cannot be started or is killed.
func Run(t testing.TB, name string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Args: append([]string{name}, args...), Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		r.ExitCode = exit.ExitCode()
	default:
		t.Fatalf("running %s: %v\n%s", strings.Join(r.Args, " "), err, r)
	}
	if strings.Contains(r.Stderr, "goroutine ") && strings.Contains(r.Stderr, "panic") {
		t.Errorf("%s panicked:\n%s", name, r)
	}
	return r
}

// IPVSGuard runs the ipvs-guard binary under test.
func IPVSGuard(t testing.TB, args ...string) Result {
	t.Helper()
	return Run(t, Bin(), args...)
}

// SetSysctl writes a sysctl (dotted name, e.g. net.ipv4.conf.all.arp_ignore)
// through /proc/sys and restores its old value when the test ends.
func SetSysctl(t testing.TB, name, value string) {
	t.Helper()
	p := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		t.Fatalf("setting %s: %v", name, err)
	}
	t.Cleanup(func() { _ = os.WriteFile(p, old, 0o644) })
}

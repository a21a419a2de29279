// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Budgets while the modules check and the loader parse every host file at
// its size limit at once. The live heap (what the parsers hold) gets half
// the chart's 128 MiB memory limit: in the pod, GOMEMLIMIT (the container's
// limit) makes the garbage collector keep the rest for garbage. Everything
// the Go runtime maps, garbage included at the default GOGC (diagnose on a
// host), must stay under the chart's limit itself.
const (
	liveHeapBudget = 64 << 20
	mappedBudget   = 128 << 20
)

// Environment of the child process TestParserMemoryAtLimits starts.
const (
	memTreeEnv = "IPVS_GUARD_MEMORY_TREE"
	memFixEnv  = "IPVS_GUARD_MEMORY_FIX"
)

// growFile appends lines made by line(i) to the file at p (created if
// missing) until it is exactly size bytes, the last line padded with spaces.
func growFile(t *testing.T, p string, size int64, line func(i int) string) {
	t.Helper()
	head, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(head)
	n := int64(len(head))
	last := ""
	for i := 0; ; i++ {
		l := line(i)
		if n+int64(len(l)) > size {
			break
		}
		if last != "" {
			w.WriteString(last)
		}
		last = l
		n += int64(len(l))
	}
	// The last line, padded to the exact size before its newline.
	w.WriteString(strings.TrimSuffix(last, "\n") + strings.Repeat(" ", int(size-n)) + "\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != size {
		t.Fatalf("%s: %v, %d bytes, want %d", p, err, fi.Size(), size)
	}
}

// TestParserMemoryAtLimits grows every host file the modules check and the
// loader parse to its size limit (valid to the end, the shortest lines, each
// a new module: the parsers' worst case), all in one tree, then runs the
// check (observe, then with remediation) and the loader's reads in a fresh
// process and fails when its peak live heap or all the Go runtime mapped
// goes over budget. The figures are the runtime's own (runtime/metrics
// /gc/heap/live:bytes after each collection, and
// /memory/classes/total:bytes, which only grows), so the race detector's
// shadow memory does not count; the process's VmHWM is logged beside them.
func TestParserMemoryAtLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("writes about 50 MiB of files and runs two processes")
	}
	dir := copyTree(t, "debian12")
	if keep := os.Getenv("IPVS_GUARD_MEMORY_KEEP"); keep != "" {
		dir = keep // to profile the child: go test -run TestParserMemoryChild with IPVS_GUARD_MEMORY_TREE set
		if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "debian12"))); err != nil {
			t.Fatal(err)
		}
	}
	rel := "6.1.0-56-amd64"
	lib := filepath.Join(dir, "lib/modules", rel)
	// modules-load.d files and /etc/modules are read as a stream, holding
	// one declaration per module and file, so their size costs time, not
	// memory: under the race detector (ten times slower) they are 1 MiB,
	// and make bench-memory measures them at their limit.
	streamed := limitModulesLoadConf
	if raceDetector {
		streamed.Max = 1 << 20
	}
	files := []struct {
		path string
		lim  hostfs.Limit
		line func(i int) string
	}{
		{filepath.Join(lib, "modules.dep"), limitModulesDep, func(i int) string { return fmt.Sprintf("m%07x.ko:\n", i) }},
		{filepath.Join(lib, "modules.builtin"), limitModulesBuiltin, func(i int) string { return fmt.Sprintf("b%07x.ko\n", i) }},
		{filepath.Join(lib, "modules.alias"), limitModulesAlias, func(i int) string { return fmt.Sprintf("alias a%07x m%07x\n", i, i) }},
		{filepath.Join(lib, "modules.alias.bin"), limitBinIndex, func(int) string { return "\x00\x00\x00\x00\x00\x00\x00\n" }},
		{filepath.Join(lib, "modules.dep.bin"), limitBinIndex, func(int) string { return "\x00\x00\x00\x00\x00\x00\x00\n" }},
		{filepath.Join(lib, "modules.softdep"), limitModulesSoftdep, func(i int) string { return fmt.Sprintf("softdep m%07x pre: p\n", i) }},
		{filepath.Join(dir, "etc/modprobe.d/big.conf"), limitModprobeTotal, func(i int) string { return fmt.Sprintf("options m%07x a=1\n", i) }},
		{filepath.Join(dir, "proc/modules"), limitProcModules, func(i int) string { return fmt.Sprintf("p%07x 1 0 - Live 0x0\n", i) }},
		{filepath.Join(dir, "etc/modules-load.d/big.conf"), streamed, func(i int) string { return []string{"ip_vs\n", fmt.Sprintf("d%07x\n", i)}[i%2] }},
		{filepath.Join(dir, "etc/modules"), streamed, func(i int) string { return []string{"nf_conntrack\n", fmt.Sprintf("e%07x\n", i)}[i%2] }},
		{filepath.Join(dir, "etc/modules-load.d/ipvs.conf"), limitOwnedDeclarationFile, func(i int) string { return fmt.Sprintf("o%07x\n", i) }},
	}
	for _, f := range files {
		growFile(t, f.path, f.lim.Max, f.line)
	}
	for _, fix := range []bool{false, true} {
		t.Run(fmt.Sprintf("remediate=%v", fix), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestParserMemoryChild$", "-test.v")
			cmd.Env = append(os.Environ(), memTreeEnv+"="+dir, memFixEnv+"="+strconv.FormatBool(fix))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			var live, total, hwm int64
			for _, l := range strings.Split(string(out), "\n") {
				if _, err := fmt.Sscanf(strings.TrimSpace(l), "memory: live heap %d bytes, runtime %d bytes, VmHWM %d kB", &live, &total, &hwm); err == nil {
					break
				}
			}
			if total == 0 {
				t.Fatalf("child printed no figures:\n%s", out)
			}
			mib := func(b int64) float64 { return float64(b) / (1 << 20) }
			t.Logf("every file at its limit: peak live heap %.1f MiB (budget %d), Go runtime mapped %.1f MiB (budget %d), process peak RSS %.1f MiB",
				mib(live), liveHeapBudget>>20, mib(total), mappedBudget>>20, float64(hwm)/1024)
			if live > liveHeapBudget {
				t.Errorf("parsing host files at their limits held %.1f MiB of live heap, over the %d MiB budget", mib(live), liveHeapBudget>>20)
			}
			if total > mappedBudget {
				t.Errorf("parsing host files at their limits mapped %.1f MiB, over the %d MiB budget", mib(total), mappedBudget>>20)
			}
		})
	}
}

// TestParserMemoryChild is the process TestParserMemoryAtLimits starts.
func TestParserMemoryChild(t *testing.T) {
	dir := os.Getenv(memTreeEnv)
	if dir == "" {
		t.Skip("run by TestParserMemoryAtLimits")
	}
	// The live heap after each garbage collection, sampled until the end.
	var peakLive atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peakLive.Load() {
				peakLive.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	ctx := context.Background()
	root := hostfs.New(dir)
	fix := os.Getenv(memFixEnv) == "true"
	// The modules check as diagnose runs it (its loader, for a tree whose
	// kernel is not the running one, reads nothing more).
	c := NewChecker(Config{Root: root, Scheduler: "nosuch", Remediate: fix})
	res, err := c.Run(ctx)
	if err != nil {
		t.Fatalf("modules check: %v", err)
	}
	t.Logf("modules check: %s %s", res.Status, res.Reason)
	// The loader's reads, as on the running kernel: its module index,
	// modules.softdep and modprobe.d, then, for a name modules.dep does not
	// list, modules.alias.bin and modules.alias.
	l, err := newLoader(root, "6.1.0-56-amd64", &fakeKernel{})
	if err != nil {
		t.Fatalf("loader: %v", err)
	}
	_, _ = l.Load(ctx, []string{"ip_vs_nosuch"})
	runtime.GC() // the live heap with everything still held
	runtime.KeepAlive(l)
	runtime.KeepAlive(res)
	time.Sleep(time.Millisecond)
	close(stop)
	<-done
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	b, _ := os.ReadFile("/proc/self/status") // Linux only; 0 elsewhere
	var hwm int64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			hwm, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	fmt.Printf("memory: live heap %d bytes, runtime %d bytes, VmHWM %d kB\n", peakLive.Load(), s[0].Value.Uint64(), hwm)
}

// TestOwnedFileLimits: an owned declaration file near its merge limit is
// not rewritten past it (the next run could not read it back): the fix
// fails naming the limit and the file keeps every byte; a long one that
// fits is merged and the remediation shows the changes, not the file.
func TestOwnedFileLimits(t *testing.T) {
	tests := []struct {
		name      string
		size      int64
		wantWrite bool
	}{
		{"at the limit", limitOwnedDeclarationFile.Max, false},
		{"long but fits", 64 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "debian12")
			owned := filepath.Join(dir, "etc/modules-load.d/ipvs.conf")
			growFile(t, owned, tt.size, func(i int) string { return fmt.Sprintf("o%07x\n", i) })
			before, _ := os.ReadFile(owned)
			observe := NewChecker(Config{Root: hostfs.New(dir), Loader: &procLoader{root: dir}})
			res, err := observe.Run(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range res.Remediation {
				if len(s) > maxShownDeclarationLines+2 {
					t.Errorf("a remediation step of %d lines: the file is shown whole", len(s))
				}
			}
			fix := NewChecker(Config{Root: hostfs.New(dir), Remediate: true, Loader: &procLoader{root: dir}})
			res, err = fix.Run(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(owned)
			if tt.wantWrite {
				if !strings.HasPrefix(string(after), string(before)) || !strings.Contains(string(after), "\nip_vs\n") {
					t.Errorf("the merged file lost lines or declares nothing new (%d → %d bytes)", len(before), len(after))
				}
				return
			}
			if string(after) != string(before) {
				t.Errorf("the owned file changed although its merge is over the limit")
			}
			if !strings.Contains(res.Message, limitOwnedDeclarationFile.String()) {
				t.Errorf("message does not name the %s: %s", limitOwnedDeclarationFile, res.Message)
			}
		})
	}
}

// TestScanDeclarationsBounded: a module declared on every line of a file
// is held once; more distinct declarations than any host has (each would
// be a stale finding and a line of the report) is an error, not gigabytes.
func TestScanDeclarationsBounded(t *testing.T) {
	dir := copyTree(t, "debian12")
	big := filepath.Join(dir, "etc/modules-load.d/big.conf")
	growFile(t, big, 1<<20, func(int) string { return "ip_vs\n" })
	decls, err := ScanDeclarations(hostfs.New(dir), isIPVSRelated)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range decls {
		if d.File == "/etc/modules-load.d/big.conf" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("ip_vs on every line of a file: %d declarations held, want 1", n)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	growFile(t, big, 1<<20, func(i int) string { return fmt.Sprintf("ip_vs_%07x\n", i) })
	if _, err := ScanDeclarations(hostfs.New(dir), isIPVSRelated); !errors.Is(err, ErrTooManyDeclarations) || !strings.Contains(err.Error(), "big.conf") {
		t.Errorf("%d distinct declarations: %v, want ErrTooManyDeclarations naming the file", 1<<20/14, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// fillModprobe writes n modprobe.d files of size bytes each, every line
// made by line(file, i).
func fillModprobe(t testing.TB, dir string, n, size int, line func(f, i int) string) {
	t.Helper()
	d := filepath.Join(dir, "etc/modprobe.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for f := range n {
		var b strings.Builder
		for i := 0; ; i++ {
			l := line(f, i)
			if b.Len()+len(l) > size {
				break
			}
			b.WriteString(l)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.conf", f)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModprobeBudget: many modprobe.d files each under its limit are an
// error naming the budget once they pass it together, at once, not after
// parsing them all; under it they are read.
func TestModprobeBudget(t *testing.T) {
	blacklist := func(f, i int) string { return fmt.Sprintf("blacklist b%03d_%07x\n", f, i) }
	tests := []struct {
		name  string
		n     int
		size  int
		wantE error
	}{
		{name: "a real host's few KiB", n: 20, size: 1 << 10},
		{name: "files up to the budget", n: 2, size: 128 << 10},
		{name: "one file at the file limit: past the budget", n: 1, size: 1 << 20, wantE: ErrModprobeBudget},
		{name: "35 files of 1 MiB", n: 35, size: 1 << 20, wantE: ErrModprobeBudget},
		{name: "100 files of 1 MiB", n: 100, size: 1 << 20, wantE: ErrModprobeBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fillModprobe(t, dir, tt.n, tt.size, blacklist)
			start := time.Now()
			_, err := ReadModprobeDirs(hostfs.New(dir))
			if !errors.Is(err, tt.wantE) || (err != nil && tt.wantE == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantE)
			}
			if err != nil && (!strings.Contains(err.Error(), "/etc/modprobe.d") || !strings.Contains(err.Error(), "256 KiB limit")) {
				t.Errorf("the error names neither the directory nor the budget: %v", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

// TestModprobeOptionsLinear: a module's options over many lines are joined
// once, in order (appending to a growing string per line took 12 s for one
// 1 MiB file), across files too.
func TestModprobeOptionsLinear(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "options m a%07x=1\n", i)
	}
	start := time.Now()
	c, err := ParseModprobeConfig(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	if o := c.Options["m"]; !strings.HasPrefix(o, "a0000000=1 a0000001=1 ") {
		t.Errorf("options of m: %.40q", o)
	}
	dir := t.TempDir()
	fillModprobe(t, dir, 1, 100<<10, func(_, i int) string { return fmt.Sprintf("options m a%07x=1\n", i) })
	if err := os.WriteFile(filepath.Join(dir, "etc/modprobe.d/z.conf"), []byte("options m last=1\noptions n x=1 y=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = ReadModprobeDirs(hostfs.New(dir))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Options["m"]; !strings.HasPrefix(o, "a0000000=1 a0000001=1 ") || !strings.HasSuffix(o, " last=1") {
		t.Errorf("options of m: %.40q…%q", o, o[max(0, len(o)-40):])
	}
	if c.Options["n"] != "x=1 y=2" {
		t.Errorf("options of n: %q", c.Options["n"])
	}
}

// TestModprobeCache: a resync re-parses only the files that changed, and
// reads the same configuration.
func TestModprobeCache(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "etc/modprobe.d")
	write := func(name, s string) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.conf", "blacklist ip_vs\noptions ip_vs conn_tab_bits=12\n")
	write("b.conf", "install ip_vs_sh /bin/false\n")
	var mc ModprobeCache
	root := hostfs.New(dir)
	first, err := mc.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	again, err := mc.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Error("unchanged files were parsed again")
	}
	if fresh, err := ReadModprobeDirs(root); err != nil || fmt.Sprint(fresh) != fmt.Sprint(again) {
		t.Errorf("the cached read differs from a fresh one (%v):\n%+v\n%+v", err, fresh, again)
	}
	if first.BlacklistFile["ip_vs"] != "/etc/modprobe.d/a.conf" || first.InstallFile["ip_vs_sh"] != "/etc/modprobe.d/b.conf" {
		t.Errorf("files not recorded: %+v", first)
	}
	write("a.conf", "options ip_vs conn_tab_bits=14\n")
	changed, err := mc.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Blacklist["ip_vs"] || changed.Options["ip_vs"] != "conn_tab_bits=14" || changed.Install["ip_vs_sh"] == "" {
		t.Errorf("a changed file not read again: %+v", changed)
	}
	if err := os.Remove(filepath.Join(d, "b.conf")); err != nil {
		t.Fatal(err)
	}
	if c, err := mc.Read(root); err != nil || c.Install["ip_vs_sh"] != "" || len(mc.ids) != 1 {
		t.Errorf("a removed file still read (%v): %+v, %d cached", err, c, len(mc.ids))
	}
}

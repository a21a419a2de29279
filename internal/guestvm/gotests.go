// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// TestsOptions selects and configures the guest-tagged Go tests a run packs.
type TestsOptions struct {
	// RepoRoot is the module's checkout.
	RepoRoot string
	// Packages are ./dir package paths; empty finds every package with
	// guest-tagged test files.
	Packages []string
	// Bench runs Benchmark functions instead of Test functions.
	Bench bool
	// Run is -test.run (default: the package's guest-tagged Test functions).
	Run string
	// BenchRE is the benchmark name pattern (default: the package's
	// guest-tagged Benchmark functions).
	BenchRE string
	// BenchTime is -test.benchtime (default 10x).
	BenchTime string
	// Timeout is -test.timeout for tests (default 5m).
	Timeout string
	// ExtraArgs are appended to every package's arguments.
	ExtraArgs []string
}

// guestTagRE matches a build constraint line with the guest tag.
var guestTagRE = regexp.MustCompile(`(?m)^//go:build .*\bguest\b`)

// GuestTestFiles returns the repository's *_test.go files (relative paths,
// tracked or untracked but not ignored) that carry the guest build tag.
func GuestTestFiles(ctx context.Context, repoRoot string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-co", "--exclude-standard", "--", "*_test.go")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		raw, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			continue // deleted but still in the index
		}
		if guestTagRE.Match(raw) {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	return files, nil
}

// funcRE matches a Test or Benchmark function declaration.
var funcRE = regexp.MustCompile(`^func ((?:Test|Benchmark)[A-Za-z0-9_]*)\([A-Za-z_][A-Za-z0-9_]* \*testing\.[TB]\)`)

// GuestFuncs returns the names of the functions with prefix ("Test" or
// "Benchmark") declared in dir's guest-tagged test files, sorted.
func GuestFuncs(dir, prefix string) ([]string, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if !guestTagRE.Match(raw) {
			continue
		}
		s := bufio.NewScanner(strings.NewReader(string(raw)))
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			if m := funcRE.FindStringSubmatch(s.Text()); m != nil && strings.HasPrefix(m[1], prefix) {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// StageGoTests builds each package's guest test binary into the payload
// (/guest/tests/<name>/test, with the package's testdata, its import path
// in package and its arguments in args, one per line; hack/guest/run-tests.sh
// runs them). Only the functions from guest-tagged files run: the package's
// unit tests compiled into the same binary stay on the host's unit tier.
// It returns how many packages it staged (an error if none).
func StageGoTests(ctx context.Context, p *Payload, o TestsOptions, logw io.Writer) (int, error) {
	pkgs := o.Packages
	if len(pkgs) == 0 {
		files, err := GuestTestFiles(ctx, o.RepoRoot)
		if err != nil {
			return 0, err
		}
		for _, f := range files {
			pkgs = append(pkgs, "./"+filepath.Dir(f))
		}
		slices.Sort(pkgs)
		pkgs = slices.Compact(pkgs)
	}
	prefix, what := "Test", "tests"
	if o.Bench {
		prefix, what = "Benchmark", "benchmarks"
	}
	n := 0
	for _, pkg := range pkgs {
		rel := strings.TrimPrefix(filepath.Clean(pkg), "./")
		funcs, err := GuestFuncs(filepath.Join(o.RepoRoot, rel), prefix)
		if err != nil {
			return n, err
		}
		if len(funcs) == 0 {
			continue
		}
		out := filepath.Join(p.Dir, "guest", "tests", strings.ReplaceAll(rel, "/", "_"))
		if err := os.MkdirAll(out, 0o755); err != nil {
			return n, err
		}
		logf(logw, "building guest tests for ./%s", rel)
		build := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "guest", "-trimpath", "-o", filepath.Join(out, "test"), "./"+rel)
		build.Dir = o.RepoRoot
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = logw, logw
		if err := build.Run(); err != nil {
			return n, fmt.Errorf("building guest tests for ./%s: %w", rel, err)
		}
		if td := filepath.Join(o.RepoRoot, rel, "testdata"); exists(td) {
			if err := copyTree(ctx, td, out, "/testdata"); err != nil {
				return n, err
			}
		}
		if err := os.WriteFile(filepath.Join(out, "package"), []byte(rel+"\n"), 0o644); err != nil {
			return n, err
		}
		args := strings.Join(append(testArgs(o, strings.Join(funcs, "|")), o.ExtraArgs...), "\n") + "\n"
		if err := os.WriteFile(filepath.Join(out, "args"), []byte(args), 0o644); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no guest-tagged %s found (files with //go:build guest)", what)
	}
	logf(logw, "staged %d guest test package(s)", n)
	return n, nil
}

// testArgs returns a package's test binary arguments for funcs ("A|B").
func testArgs(o TestsOptions, funcs string) []string {
	or := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	args := []string{"-test.v", "-test.count=1"}
	if o.Bench {
		return append(args, "-test.run=^$", "-test.bench=^("+or(o.BenchRE, funcs)+")$",
			"-test.benchtime="+or(o.BenchTime, "10x"), "-test.benchmem")
	}
	return append(args, "-test.run="+or(o.Run, "^("+funcs+")$"), "-test.timeout="+or(o.Timeout, "5m"))
}

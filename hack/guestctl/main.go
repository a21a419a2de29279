// SPDX-License-Identifier: Apache-2.0

// Command guestctl prepares and boots the project's QEMU guest
// (internal/guestvm) for the thin entry scripts under hack/: the guest tier,
// the guest benchmarks, the demo, the interactive shell and the end-to-end
// tier. The scripts install the host packages first (apt_ensure of
// `guestctl packages`), then call it.
//
//	guestctl packages                 apt packages the manifests' pkg lines name
//	guestctl releases                 the Debian releases with a pinned kernel (hack/guest/kernels/)
//	guestctl kernel-version           the Debian kernel to use ($GUEST_RELEASE's pin)
//	guestctl kernel [VERSION]         download and unpack it once; print its cache directory
//	guestctl base [-manifest M]       prepare kernel and base image; print the image's path
//	guestctl test [-bench] [flags]    pack the guest-tagged Go tests, boot, exit with their code
//	guestctl run -main SCRIPT [flags] pack SCRIPT as /guest/main, boot, exit with its code
//
// The knobs of hack/guest/README.md (GUEST_MANIFESTS, GUEST_TIMEOUT,
// GUEST_NET, GUEST_RELEASE, …) are read from the environment; flags
// override them.
// Exit codes of test and run: the guest's, 3 when it crashed or timed out,
// 2 for a usage or preparation error.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/guestvm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// env is the guest's environment configuration (hack/guest/README.md).
type env struct {
	repo, cache string
	// release is $GUEST_RELEASE ("" is guestvm.DefaultRelease).
	release string
}

func newEnv() (env, error) {
	repo := os.Getenv("REPO_ROOT")
	if repo == "" {
		wd, err := os.Getwd()
		if err != nil {
			return env{}, err
		}
		repo = wd
	}
	cache := cmp.Or(os.Getenv("IPVS_GUARD_CACHE"), filepath.Join(repo, ".cache"))
	return env{repo: repo, cache: cache, release: os.Getenv("GUEST_RELEASE")}, nil
}

// manifests reads base.manifest, $GUEST_MANIFESTS and the one-off additions.
// manifestsFlag parses a subcommand whose only flag is the repeatable
// -manifest and returns the manifests it names after $GUEST_MANIFESTS.
func (e env) manifestsFlag(cmd string, args []string) ([]guestvm.Manifest, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var extra multi
	fs.Var(&extra, "manifest", "a manifest after $GUEST_MANIFESTS (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return e.manifests(extra)
}

func (e env) manifests(extra []string) ([]guestvm.Manifest, error) {
	names := append(strings.Fields(os.Getenv("GUEST_MANIFESTS")), extra...)
	return guestvm.Manifests(e.repo, names, strings.Fields(os.Getenv("GUEST_EXTRA_MODULES")),
		strings.Fields(os.Getenv("GUEST_EXTRA_BINS")))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		return 0, errors.New("usage: guestctl packages|releases|kernel-version|kernel|base|test|run [flags]")
	}
	e, err := newEnv()
	if err != nil {
		return 0, err
	}
	switch cmd, args := args[0], args[1:]; cmd {
	case "packages":
		ms, err := e.manifestsFlag(cmd, args)
		if err != nil {
			return 0, err
		}
		for _, p := range guestvm.Packages(ms) {
			fmt.Fprintln(stdout, p)
		}
		return 0, nil
	case "releases":
		names, err := guestvm.Releases(e.repo)
		if err != nil {
			return 0, err
		}
		for _, n := range names {
			fmt.Fprintln(stdout, n)
		}
		return 0, nil
	case "kernel-version":
		rel, err := guestvm.LoadRelease(e.repo, e.cache, e.release)
		if err != nil {
			return 0, err
		}
		v, err := guestvm.KernelVersion(ctx, rel, e.cache, stderr)
		if err != nil {
			return 0, err
		}
		fmt.Fprintln(stdout, v)
		return 0, nil
	case "kernel":
		rel, err := guestvm.LoadRelease(e.repo, e.cache, e.release)
		if err != nil {
			return 0, err
		}
		v := ""
		if len(args) > 0 {
			v = args[0]
		} else if v, err = guestvm.KernelVersion(ctx, rel, e.cache, stderr); err != nil {
			return 0, err
		}
		var u *guestvm.Userland
		if !rel.Host {
			if u, err = guestvm.EnsureUserland(ctx, e.cache, rel.Apt, stderr); err != nil {
				return 0, err
			}
		}
		dir, err := guestvm.EnsureKernel(ctx, e.cache, v, rel.Apt, u, stderr)
		if err != nil {
			return 0, err
		}
		fmt.Fprintln(stdout, dir)
		return 0, nil
	case "base":
		ms, err := e.manifestsFlag(cmd, args)
		if err != nil {
			return 0, err
		}
		img, err := e.prepare(ctx, ms, stderr)
		if err != nil {
			return 0, err
		}
		fmt.Fprintln(stdout, img.Base)
		return 0, nil
	case "test", "run":
		return e.boot(ctx, cmd, args, stdout, stderr)
	}
	return 0, fmt.Errorf("unknown command %q", args[0])
}

func (e env) prepare(ctx context.Context, ms []guestvm.Manifest, logw io.Writer) (*guestvm.Image, error) {
	return guestvm.Prepare(ctx, guestvm.PrepareOptions{RepoRoot: e.repo, CacheDir: e.cache, Release: e.release, Manifests: ms,
		BzImage: os.Getenv("GUEST_BZIMAGE") == "1", Log: logw})
}

// boot is `guestctl test` and `guestctl run`.
func (e env) boot(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var files, testArgs, manifests multi
	name := fs.String("name", cmd, "the run's name: its directory is $IPVS_GUARD_CACHE/guest/runs/<name>-<pid>")
	dir := fs.String("dir", "", "the run's directory (kept, with console.log; default a temporary one under guest/runs)")
	mainScript := fs.String("main", "", "run: the script to run as /guest/main")
	shell := fs.Bool("shell", envBool("GUEST_INTERACTIVE"), "run: an interactive shell on the terminal instead of -main")
	bench := fs.Bool("bench", false, "test: run the guest-tagged benchmarks instead of the tests")
	saveConsole := fs.String("save-console", "", "copy the console log to this file after the run")
	timeout := fs.Duration("timeout", envSeconds("GUEST_TIMEOUT", 600*time.Second), "end the guest after this long ($GUEST_TIMEOUT seconds)")
	memory := fs.String("memory", cmp.Or(os.Getenv("GUEST_MEMORY"), "1G"), "guest RAM ($GUEST_MEMORY)")
	netOn := fs.Bool("net", envBool("GUEST_NET"), "QEMU user networking: the guest is 10.0.2.15, the host 10.0.2.2 ($GUEST_NET=1)")
	hostfwd := fs.String("hostfwd", os.Getenv("GUEST_NET_HOSTFWD"), "appended to the user netdev, e.g. hostfwd=tcp:127.0.0.1:8080-:80 ($GUEST_NET_HOSTFWD)")
	quiet := fs.Bool("quiet", envBool("GUEST_QUIET"), "console only to the log ($GUEST_QUIET=1)")
	filter := fs.Bool("filter", envBool("GUEST_CONSOLE_FILTER"), "hide kernel messages and the exit marker ($GUEST_CONSOLE_FILTER=1)")
	fs.Var(&files, "file", "run: SRC:GUESTPATH[:MODE] added to the payload (repeatable)")
	fs.Var(&testArgs, "test-arg", "test: an argument appended to every test binary's (repeatable)")
	fs.Var(&manifests, "manifest", "a manifest after $GUEST_MANIFESTS (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	if cmd == "run" && *mainScript == "" && !*shell {
		return 0, errors.New("run: -main SCRIPT or -shell is required")
	}
	ms, err := e.manifests(manifests)
	if err != nil {
		return 0, err
	}
	img, err := e.prepare(ctx, ms, stderr)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(stderr, "==> Debian %s, kernel %s\n", img.Release, img.KernelVersion)

	runDir := *dir
	if runDir == "" {
		runDir = filepath.Join(e.cache, "guest", "runs", fmt.Sprintf("%s-%d", *name, os.Getpid()))
		defer os.RemoveAll(runDir)
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return 0, err
	}
	main := *mainScript
	if *shell && main == "" {
		main = filepath.Join(runDir, "main.sh")
		if err := os.WriteFile(main, []byte("exec sh -l\n"), 0o755); err != nil {
			return 0, err
		}
	} else if cmd == "test" {
		main = filepath.Join(e.repo, "hack", "guest", "run-tests.sh")
	}
	payload, err := guestvm.NewPayload(filepath.Join(runDir, "payload"), filepath.Join(e.repo, "hack", "guest", "init.sh"), main)
	if err != nil {
		return 0, err
	}
	initrd := filepath.Join(runDir, "initrd")
	defer os.RemoveAll(payload.Dir)
	defer os.Remove(initrd)
	if err := stagePayload(payload, files); err != nil {
		return 0, err
	}
	if cmd == "test" {
		o := guestvm.TestsOptions{RepoRoot: e.repo, Packages: strings.Fields(os.Getenv("GUEST_PKGS")),
			Bench: *bench, Run: os.Getenv("GUEST_RUN"), BenchRE: os.Getenv("GUEST_BENCH"),
			BenchTime: os.Getenv("GUEST_BENCHTIME"), Timeout: os.Getenv("GUEST_TEST_TIMEOUT"), ExtraArgs: testArgs}
		if _, err := guestvm.StageGoTests(ctx, payload, o, stderr); err != nil {
			return 0, err
		}
	}
	if err := guestvm.Pack(ctx, img.Base, payload.Dir, initrd, envBool("GUEST_INITRD_GZIP")); err != nil {
		return 0, err
	}
	if cmd == "test" {
		fmt.Fprintf(stderr, "==> initramfs %s (base %s)\n", size(initrd), size(img.Base))
	}
	bo := guestvm.BootOptions{
		Machine: guestvm.Machine{Kernel: img.Kernel, Initrd: initrd, Memory: *memory, Net: *netOn, HostFwd: *hostfwd},
		Console: filepath.Join(runDir, "console.log"), Filter: *filter, Interactive: *shell,
		Timeout: *timeout, Log: stderr,
	}
	if !*quiet {
		bo.Stdout = stdout
	}
	code, err := guestvm.Boot(ctx, bo)
	if *saveConsole != "" {
		if raw, rerr := os.ReadFile(bo.Console); rerr == nil {
			_ = os.MkdirAll(filepath.Dir(*saveConsole), 0o755)
			_ = os.WriteFile(*saveConsole, raw, 0o644)
		}
	}
	return code, err
}

// stagePayload adds ipvs-guard, /guest/env and the -file entries.
func stagePayload(p *guestvm.Payload, files []string) error {
	if bin := os.Getenv("GUEST_IPVS_GUARD_BIN"); bin != "" {
		if err := p.Add(bin, "/usr/local/bin/ipvs-guard", 0o755); err != nil {
			return err
		}
	}
	// Environment for the guest's main script and tests.
	vars := []string{"CI=" + os.Getenv("CI"), "IPVS_GUARD_BIN=/usr/local/bin/ipvs-guard"}
	for _, v := range strings.Fields(os.Getenv("GUEST_ENV_PASS")) {
		vars = append(vars, v+"="+os.Getenv(v))
	}
	if err := p.WriteEnv(vars); err != nil {
		return err
	}
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return fmt.Errorf("-file %q: want SRC:GUESTPATH[:MODE]", f)
		}
		mode := os.FileMode(0o755)
		if len(parts) == 3 {
			m, err := strconv.ParseUint(parts[2], 8, 32)
			if err != nil {
				return fmt.Errorf("-file %q: mode: %w", f, err)
			}
			mode = os.FileMode(m)
		}
		if err := p.Add(parts[0], parts[1], mode); err != nil {
			return err
		}
	}
	return nil
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func envBool(name string) bool { return os.Getenv(name) == "1" }

// envSeconds reads a whole number of seconds from the environment.
func envSeconds(name string, def time.Duration) time.Duration {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return def
}

// size is a file's size as du -h prints it, roughly.
func size(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1fM", float64(fi.Size())/(1<<20))
}

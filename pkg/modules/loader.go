// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Errors the loader wraps (test with errors.Is).
var (
	// ErrModuleNotFound: the name is neither a module, an alias nor built in for this kernel.
	ErrModuleNotFound = errors.New("module not found")
	// ErrNotELF: a module file (after decompression) is not an ELF object.
	ErrNotELF = errors.New("not an ELF module")
	// ErrKernelMismatch: the module tree belongs to another kernel release than the running one.
	ErrKernelMismatch = errors.New("module tree is not the running kernel's")
	// ErrNotSupported: module loading is not available on this platform.
	ErrNotSupported = errors.New("module loading is not supported on this platform")
	// ErrInstallCommand: modprobe.d replaces the module's loading with an
	// install command, which ipvs-guard never runs (the usual
	// "modprobe --ignore-install <module>" wrapper is followed instead: the
	// module itself is loaded).
	ErrInstallCommand = errors.New("modprobe.d has an install command for it, which ipvs-guard does not run")
	// ErrBlacklisted: modprobe.d (or modprobe.blacklist= on the kernel
	// command line) blacklists the module; ipvs-guard never loads it, by
	// name or as a dependency.
	ErrBlacklisted = errors.New("blacklisted, which ipvs-guard does not override")
	// ErrAliasRedirect: a modprobe.d alias resolves an IPVS or conntrack
	// module name to another module; ipvs-guard does not follow it.
	ErrAliasRedirect = errors.New("a modprobe.d alias redirects it to another module, which ipvs-guard does not follow")
)

// maxModuleSize bounds a decompressed module image (the largest in-tree
// modules are a few tens of MiB).
const maxModuleSize = 256 << 20

// Loader loads kernel modules into the running kernel.
type Loader interface {
	// Load loads each named module (a module name or an alias) with
	// everything it needs. It returns the modules it inserted, in order
	// (already-loaded and built-in ones are not listed), and an error
	// joining one error per name that could not be loaded. It records each
	// insertion as "loaded <module>" with check.Record the moment it is
	// made, so a run interrupted mid-load still reports it.
	Load(ctx context.Context, names []string) ([]string, error)
}

// kernel is the syscall boundary of NativeLoader (fake in tests).
type kernel interface {
	FinitModule(fd int, params string, flags int) error
	InitModule(image []byte, params string) error
}

// moduleInitCompressedFile is MODULE_INIT_COMPRESSED_FILE (Linux ≥ 5.17).
const moduleInitCompressedFile = 0x4

// NativeLoader loads modules the way kmod's modprobe does, without running
// it: modprobe.d aliases, modules.dep (dependencies first), modules.softdep
// (pre: and post:, each name resolved through aliases, every candidate
// tried, failures ignored), modules.alias, modules.builtin (nothing to do)
// and modprobe.d options. Plain .ko files go through finit_module; .ko.xz,
// .ko.zst and .ko.gz through finit_module with MODULE_INIT_COMPRESSED_FILE
// where /sys/module/compression names the format, else they are decompressed
// in memory and passed to init_module. EEXIST counts as loaded. install and
// remove commands in modprobe.d are never run (a module with one is not
// loaded), a blacklisted module is never loaded (by name, as a dependency or
// as a soft dependency), and a modprobe.d alias that turns an IPVS or
// conntrack module name into another module is refused, not followed.
type NativeLoader struct {
	root        hostfs.Root
	ix          *Index
	confAliases []Alias // modprobe.d
	aliasFile   string  // host path of modules.alias, read on the first alias lookup
	aliasData   *string // its content once read ("" when missing)
	aliasBin    *binIndex
	aliasBinErr error // why modules.alias.bin is not used, once tried
	softdeps    map[string]Softdep
	options     map[string]string
	blacklist   map[string]bool
	install     map[string]string
	conf        *ModprobeConfig
	compression string // contents of /sys/module/compression
	k           kernel
	loaded      map[string]bool
	inserted    []string
}

var _ Loader = (*NativeLoader)(nil)

// NewNativeLoader returns a loader for the running kernel whose module files
// live under root. It refuses (ErrKernelMismatch) when root's kernel release
// (<root>/proc/sys/kernel/osrelease) is not the running kernel's (uname):
// modules from another tree must never be loaded.
func NewNativeLoader(root hostfs.Root) (*NativeLoader, error) {
	rel, err := root.KernelRelease()
	if err != nil {
		return nil, err
	}
	running, err := runningRelease()
	if err != nil {
		return nil, err
	}
	if rel != running {
		return nil, fmt.Errorf("%s holds kernel %s but the running kernel is %s: %w", root.Path("/lib/modules"), rel, running, ErrKernelMismatch)
	}
	return newLoader(root, rel, sysKernel{})
}

// nativeLoaderFor is NewNativeLoader reusing an index already read.
func nativeLoaderFor(root hostfs.Root, ix *Index) (*NativeLoader, error) {
	running, err := runningRelease()
	if err != nil {
		return nil, err
	}
	if ix.Release != running {
		return nil, fmt.Errorf("%s holds kernel %s but the running kernel is %s: %w", root.Path("/lib/modules"), ix.Release, running, ErrKernelMismatch)
	}
	return loaderFromIndex(root, ix, sysKernel{})
}

// newLoader reads the module index and modprobe configuration of release
// under root; k performs the syscalls.
func newLoader(root hostfs.Root, release string, k kernel) (*NativeLoader, error) {
	ix, err := ReadIndex(root, release)
	if err != nil {
		return nil, err
	}
	return loaderFromIndex(root, ix, k)
}

func loaderFromIndex(root hostfs.Root, ix *Index, k kernel) (*NativeLoader, error) {
	release := ix.Release
	if ix.DepMissing {
		return nil, fmt.Errorf("cannot load modules: %s does not exist (run depmod %s, or mount /lib/modules): %w", root.Path(ix.host, "modules.dep"), release, os.ErrNotExist)
	}
	l := &NativeLoader{root: root, ix: ix, k: k, softdeps: map[string]Softdep{}, options: map[string]string{}, blacklist: map[string]bool{},
		aliasFile: path.Join(ix.host, "modules.alias")}
	if err := parseFile(root, path.Join(ix.host, "modules.softdep"), limitModulesSoftdep, func(r io.Reader) error {
		s, err := ParseModulesSoftdep(r)
		if s != nil {
			l.softdeps = s
		}
		return err
	}); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	conf, err := ReadModprobeDirs(root)
	if err != nil {
		return nil, err
	}
	l.conf = conf
	l.confAliases = conf.Aliases
	l.options = conf.Options
	l.blacklist = conf.Blacklist
	l.install = conf.Install
	for m, s := range conf.Softdeps { // modprobe.d softdeps replace depmod's, as in kmod
		l.softdeps[m] = s
	}
	if b, err := root.ReadFile("/sys/module/compression", limitSmallKernel); err == nil {
		l.compression = strings.TrimSpace(string(b))
	}
	return l, nil
}

// ModprobeDirs are the modprobe.d directories, earlier ones overriding
// same-named files in later ones (kmod's search path).
var ModprobeDirs = []string{"/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d"}

// KernelCmdline is where kmod reads modprobe.blacklist= (host path).
const KernelCmdline = "/proc/cmdline"

// ModprobeFiles returns, per file name, the modprobe.d file kmod reads
// under that name (host paths), as libkmod lists them: names ending in
// .conf that are not hidden; links are followed (inside root) and an entry
// that is a directory or cannot be stat'ed (a dangling link) is skipped
// without hiding a same-named file in a later directory; the first
// directory of ModprobeDirs holding a name wins. A missing or unreadable
// directory is skipped, as kmod skips it.
func ModprobeFiles(root hostfs.Root) map[string]string {
	files := map[string]string{}
	for _, d := range ModprobeDirs {
		ents, err := root.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if len(n) < 6 || !strings.HasSuffix(n, ".conf") || strings.HasPrefix(n, ".") || files[n] != "" {
				continue
			}
			p := path.Join(d, n)
			if isDevNullLink(root, p) {
				files[n] = p // masks the name, read as nothing
				continue
			}
			fi, err := root.Stat(p)
			if err != nil || fi.IsDir() {
				continue
			}
			files[n] = p
		}
	}
	return files
}

// isDevNullLink reports whether host path p is a symbolic link to /dev/null
// (which the host resolves to its own /dev/null, whatever root holds).
func isDevNullLink(root hostfs.Root, p string) bool {
	fi, err := root.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	t, err := root.Readlink(p)
	return err == nil && isDevNullTarget(p, t)
}

// cmdlineBlacklist returns the modules of every modprobe.blacklist= on a
// kernel command line (comma-separated, as written: kmod does not turn
// '-' into '_' there).
func cmdlineBlacklist(cmdline string) []string {
	var out []string
	for _, tok := range strings.Fields(cmdline) {
		tok = strings.ReplaceAll(tok, `"`, "")
		if v, ok := strings.CutPrefix(tok, "modprobe.blacklist="); ok {
			for _, m := range strings.Split(v, ",") {
				if m != "" {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// Load implements Loader.
func (l *NativeLoader) Load(ctx context.Context, names []string) ([]string, error) {
	if err := l.refreshLoaded(); err != nil {
		return nil, err
	}
	l.inserted = nil
	var errs []error
	for _, n := range names {
		if err := l.loadRequested(ctx, Normalize(n)); err != nil {
			errs = append(errs, err)
		}
	}
	return append([]string(nil), l.inserted...), errors.Join(errs...)
}

func (l *NativeLoader) refreshLoaded() error {
	mods, err := ReadProcModules(l.root)
	if err != nil {
		return err
	}
	l.loaded = map[string]bool{}
	for _, m := range mods {
		if m.State != "Unloading" {
			l.loaded[m.Name] = true
		}
	}
	return nil
}

// loadRequested loads a name given by the caller: a module, or an alias
// whose candidates are tried in turn (success when any loads).
func (l *NativeLoader) loadRequested(ctx context.Context, name string) error {
	if l.ix.IsBuiltin(name) || l.loaded[name] {
		return nil
	}
	if targets, files := l.conf.configAlias(name); isIPVSRelated(name) && len(targets) > 0 && !contains(targets, name) {
		return fmt.Errorf("loading %s: %w (alias in %s resolves it to %s)", name, ErrAliasRedirect, strings.Join(files, ", "), strings.Join(targets, ", "))
	}
	cands := l.lookup(name)
	if len(cands) == 0 {
		return fmt.Errorf("loading %s: %w: not in modules.dep, modules.builtin or modules.alias of kernel %s", name, ErrModuleNotFound, l.ix.Release)
	}
	var errs []error
	for _, c := range cands {
		err := l.insertTree(ctx, c, map[string]bool{})
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	if len(cands) == 1 && cands[0] == name {
		return errs[0]
	}
	return fmt.Errorf("loading %s: no candidate loaded (%s): %w", name, strings.Join(cands, ", "), errors.Join(errs...))
}

// lookup resolves a name to module names the way kmod does: modprobe.d
// aliases, then a module of that name, then modules.alias (blacklisted
// modules skipped), then built-ins.
func (l *NativeLoader) lookup(name string) []string {
	if c := resolveAlias(l.confAliases, name); len(c) > 0 {
		return c
	}
	if l.ix.Loadable(name) {
		return []string{name}
	}
	var out []string
	for _, c := range l.moduleAliases(name) {
		if !l.blacklist[c] {
			out = append(out, c)
		}
	}
	if len(out) > 0 {
		return out
	}
	if l.ix.IsBuiltin(name) {
		return []string{name}
	}
	return nil
}

// moduleAliases resolves name through depmod's alias index, reading it on
// first use (most loads never need it): modules.alias.bin, searched as
// kmod's modprobe does, or — when that file is missing or malformed — the
// text modules.alias, scanned line by line. Both give the same candidates
// in the same order (depmod's module order). A missing or unreadable text
// file resolves nothing.
func (l *NativeLoader) moduleAliases(name string) []string {
	if l.aliasBin == nil && l.aliasBinErr == nil {
		l.aliasBin, l.aliasBinErr = readBinIndex(l.root, l.aliasFile+".bin")
	}
	if l.aliasBin != nil {
		c, err := resolveAliasBin(l.aliasBin, name)
		if err == nil {
			return c
		}
		l.aliasBin, l.aliasBinErr = nil, fmt.Errorf("searching %s.bin: %w", l.root.Path(l.aliasFile), err)
	}
	if l.aliasData == nil {
		s := ""
		_ = parseFile(l.root, l.aliasFile, limitModulesAlias, func(r io.Reader) error {
			var err error
			s, err = readString(r) // one copy of the file, not a []byte and a string
			return err
		})
		l.aliasData = &s
	}
	return scanAliases(*l.aliasData, name)
}

// readBinIndex reads and checks the binary index file at host path p under root.
func readBinIndex(root hostfs.Root, p string) (*binIndex, error) {
	b, err := root.ReadFile(p, limitBinIndex)
	if err != nil {
		return nil, fmt.Errorf("reading binary index: %w", err)
	}
	x, err := parseBinIndex(b)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root.Path(p), err)
	}
	return x, nil
}

// insertTree loads module name after its pre softdeps and its dependencies
// (last modules.dep entry first), then its post softdeps.
func (l *NativeLoader) insertTree(ctx context.Context, name string, visiting map[string]bool) error {
	if l.ix.IsBuiltin(name) || l.loaded[name] || visiting[name] {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("loading %s: %w", name, err)
	}
	visiting[name] = true
	if l.blacklist[name] {
		return fmt.Errorf("loading %s: %w (blacklisted in %s)", name, ErrBlacklisted, l.conf.BlacklistFile[name])
	}
	if cmd, ok := l.install[name]; ok && !ignoresInstall(cmd, name) {
		// The usual "modprobe --ignore-install <module>" wrapper still
		// loads the module itself, so it is loaded here as the boot-time
		// check already accepts; any other install command replaces
		// loading, and running it is not this loader's job.
		return fmt.Errorf("loading %s: %w (install %s %s in %s)", name, ErrInstallCommand, name, cmd, l.conf.InstallFile[name])
	}
	e, err := l.ix.Entry(name)
	if err != nil {
		return fmt.Errorf("loading %s: %w", name, err)
	}
	sd := l.softdeps[name]
	l.softLoad(ctx, name, "pre", sd.Pre, visiting)
	for i := len(e.Deps) - 1; i >= 0; i-- {
		dep := ModuleNameFromPath(e.Deps[i])
		if dep == "" {
			return fmt.Errorf("loading %s: modules.dep lists %q as a dependency, which is not a module file", name, e.Deps[i])
		}
		if err := l.insertTree(ctx, dep, visiting); err != nil {
			return fmt.Errorf("loading %s: dependency %s: %w", name, dep, err)
		}
	}
	n := len(l.inserted)
	if err := l.insertFile(name, e.Path); err != nil {
		return err
	}
	if len(l.inserted) > n {
		check.Record(ctx, "loaded "+name)
	}
	l.softLoad(ctx, name, "post", sd.Post, visiting)
	return nil
}

// softLoad loads soft dependencies; like kmod it ignores their failures.
func (l *NativeLoader) softLoad(ctx context.Context, of, kind string, names []string, visiting map[string]bool) {
	for _, s := range names {
		for _, c := range l.lookup(s) {
			if err := l.insertTree(ctx, c, visiting); err != nil {
				klog.FromContext(ctx).V(2).Info("Soft dependency not loaded", "module", of, "softdep", kind, "candidate", c, "err", err)
			}
		}
	}
}

// insertFile inserts one module file into the kernel.
func (l *NativeLoader) insertFile(name, rel string) error {
	file := path.Join(l.ix.host, rel)
	params := l.options[name]
	var err error
	switch format := compressionOf(rel); format {
	case "":
		err = l.finit(file, params)
	default:
		err = l.insertCompressed(file, format, params)
	}
	if errors.Is(err, syscall.EEXIST) {
		err = nil
	} else if err == nil {
		l.inserted = append(l.inserted, name)
	}
	if err != nil {
		return fmt.Errorf("loading module %s from %s: %w", name, l.root.Path(file), err)
	}
	l.loaded[name] = true
	return nil
}

func (l *NativeLoader) finit(file, params string) error {
	f, err := l.root.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || !isELF(magic[:]) {
		return ErrNotELF
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return l.k.FinitModule(int(f.Fd()), params, 0)
}

func (l *NativeLoader) insertCompressed(file, format, params string) error {
	f, err := l.root.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if l.compression == format {
		err := l.k.FinitModule(int(f.Fd()), params, moduleInitCompressedFile)
		if !errors.Is(err, syscall.EOPNOTSUPP) && !errors.Is(err, syscall.EINVAL) {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	img, err := decompress(f, format)
	if err != nil {
		return fmt.Errorf("decompressing %s: %w", format, err)
	}
	if !isELF(img) {
		return ErrNotELF
	}
	return l.k.InitModule(img, params)
}

// compressionOf names the compression of a module file by its suffix
// ("xz", "zstd", "gzip", as /sys/module/compression spells them).
func compressionOf(p string) string {
	switch {
	case strings.HasSuffix(p, ".ko.xz"):
		return "xz"
	case strings.HasSuffix(p, ".ko.zst"):
		return "zstd"
	case strings.HasSuffix(p, ".ko.gz"):
		return "gzip"
	}
	return ""
}

// decompress reads a whole compressed module image, at most maxModuleSize bytes.
func decompress(r io.Reader, format string) ([]byte, error) {
	var zr io.Reader
	switch format {
	case "xz":
		x, err := xz.NewReader(r)
		if err != nil {
			return nil, err
		}
		zr = x
	case "zstd":
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxModuleSize))
		if err != nil {
			return nil, err
		}
		defer z.Close()
		zr = z
	case "gzip":
		g, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		zr = g
	default:
		return nil, fmt.Errorf("unknown compression %q", format)
	}
	var b bytes.Buffer
	n, err := io.Copy(&b, io.LimitReader(zr, maxModuleSize+1))
	if err != nil {
		return nil, err
	}
	if n > maxModuleSize {
		return nil, fmt.Errorf("image larger than %d bytes", maxModuleSize)
	}
	return b.Bytes(), nil
}

func isELF(b []byte) bool { return len(b) >= 4 && string(b[:4]) == "\x7fELF" }

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Reasons of the modules check, most severe first (they become the
// IPVSModulesMissing condition's reason).
const (
	// ReasonModuleNotInKernel: a needed module is not shipped by the running kernel.
	ReasonModuleNotInKernel = "ModuleNotInKernel"
	// ReasonModulesNotLoaded: a needed module the kernel ships is not loaded.
	ReasonModulesNotLoaded = "ModulesNotLoaded"
	// ReasonModuleBlocked: modprobe.d (a blacklist, an install command or an
	// alias to another module) keeps systemd-modules-load from loading a
	// needed module at boot.
	ReasonModuleBlocked = "ModuleBlockedByModprobeConfig"
	// ReasonModulesNotPersisted: a needed module is not declared for boot.
	ReasonModulesNotPersisted = "ModulesNotPersisted"
	// ReasonStaleModuleDeclaration: a boot declaration names a module the kernel lacks.
	ReasonStaleModuleDeclaration = "StaleModuleDeclaration"
	// ReasonModulesReady: every needed module is loaded and declared.
	ReasonModulesReady = "ModulesLoadedAndDeclared"
)

// Config configures the modules check.
type Config struct {
	// Root is the host root every path is read (and written) under.
	Root hostfs.Root
	// Scheduler is kube-proxy's IPVS scheduler; empty means DefaultScheduler.
	Scheduler string
	// SchedulerFunc, when set, is asked for the scheduler on every Run (so
	// an agent follows kube-proxy's configuration as it changes); an empty
	// answer means Scheduler.
	SchedulerFunc func(ctx context.Context) string
	// Remediate makes Run write the declaration file and load missing
	// modules before it observes again. Off, Run changes nothing.
	Remediate bool
	// DeclarationFile is the modules-load.d file ipvs-guard owns (a host
	// path, resolved under Root); empty means DefaultDeclarationFile.
	DeclarationFile string
	// Loader loads modules when Remediate is set; nil means a NativeLoader
	// for Root, built at the first load (it refuses a Root whose kernel
	// release is not the running kernel's).
	Loader Loader
	// Distro words the remediation; empty means distro.Detect(Root).
	Distro distro.Distro
	// IPVSUse, when set, is asked on every Run whether the IPVS
	// prerequisites apply (kube-proxy's mode): when they do not, Run reads
	// and changes nothing and reports check.ReasonIPVSNotInUse; when the
	// mode is not known (IPVSUse.Unknown), Run reports and does not
	// remediate, and its message says why. Nil: they always apply.
	IPVSUse check.IPVSUseFunc
}

// Checker is the modules check (check name "modules").
type Checker struct {
	cfg Config
	// modprobe keeps the parsed modprobe.d files between runs.
	modprobe ModprobeCache
}

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the modules check for cfg.
func NewChecker(cfg Config) *Checker {
	if cfg.DeclarationFile == "" {
		cfg.DeclarationFile = DefaultDeclarationFile
	}
	if cfg.Scheduler == "" {
		cfg.Scheduler = DefaultScheduler
	}
	return &Checker{cfg: cfg}
}

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameModules }

// Run implements check.Checker. It observes; with Remediate it then
// merge-writes the declaration file, loads what is missing and observes
// again, so the result describes the state after the fix, with what changed
// in Actions and anything that failed in the message. The error is non-nil
// only when the state could not be read at all.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	log := klog.FromContext(ctx).WithValues("check", check.NameModules)
	var use check.IPVSUse
	if c.cfg.IPVSUse != nil {
		if use = c.cfg.IPVSUse(ctx); !use.Applies {
			return use.NotInUse(c.Name()), nil
		}
	}
	rel, err := c.cfg.Root.KernelRelease()
	if err != nil {
		return check.Result{}, err
	}
	ix, err := ReadIndex(c.cfg.Root, rel)
	if err != nil {
		return check.Result{}, err
	}
	sched := c.cfg.Scheduler
	if c.cfg.SchedulerFunc != nil {
		if s := c.cfg.SchedulerFunc(ctx); s != "" {
			sched = s
		}
	}
	if err := ValidateScheduler(sched); err != nil {
		return check.Result{}, fmt.Errorf("the configured scheduler: %w", err)
	}
	obs, err := observeWith(c.cfg.Root, sched, ix, &c.modprobe)
	if err != nil {
		return check.Result{}, err
	}
	var actions []string
	var failures []string
	// Nothing is loaded or declared while kube-proxy's mode is not known
	// (docs/design.md §3b): the result reports, and its message says why.
	if c.cfg.Remediate && !use.Unknown {
		actions, failures = c.remediate(klog.NewContext(ctx, log), obs)
		if obs, err = observeWith(c.cfg.Root, sched, ix, &c.modprobe); err != nil {
			return check.Result{}, err
		}
	}
	res := c.result(obs)
	res.Actions = actions
	switch {
	case use.Unknown:
		res.Message = strings.TrimSpace(use.Message + ". " + res.Message)
	case use.Message != "":
		res.Message = strings.TrimSpace(res.Message + " " + use.Message + ".")
	}
	if len(failures) > 0 {
		res.Message += " Remediation failed: " + strings.Join(failures, "; ") + "."
		if res.Status == check.StatusOK {
			// Everything is fine now, yet something could not be done: say so.
			res.Status = check.StatusError
			res.Reason = "RemediationFailed"
		}
	}
	return res, nil
}

// ownedSource is where the owned declaration file's merge starts.
type ownedSource struct {
	// link is the target when the owned file is a symbolic link: it is then
	// neither read nor written.
	link string
	// from is the host path of the file systemd reads today under the
	// owned file's name: the owned file itself, a same-named file in a
	// later modules-load.d directory, or "" when there is none.
	from string
}

// ownedSource finds what systemd reads today under the owned file's name.
func (c *Checker) ownedSource() (ownedSource, error) {
	decl := c.cfg.DeclarationFile
	if fi, err := c.cfg.Root.Lstat(decl); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		t, _ := c.cfg.Root.Readlink(decl)
		return ownedSource{link: t}, nil
	}
	if !contains(ModulesLoadDirs, path.Dir(decl)) {
		return ownedSource{from: decl}, nil
	}
	files, err := ModulesLoadFiles(c.cfg.Root)
	if err != nil {
		return ownedSource{}, err
	}
	from := files[path.Base(decl)]
	if from == "" || indexOf(ModulesLoadDirs, path.Dir(from)) <= indexOf(ModulesLoadDirs, path.Dir(decl)) {
		// Nothing of the name, the owned file itself, or a higher-priority
		// file hiding it (then only the owned file is the owned file's
		// business).
		from = decl
	}
	return ownedSource{from: from}, nil
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// ownedMerge computes the owned declaration file's new content: it starts
// from the file systemd reads today under the owned file's name, so that no
// module declared there stops being loaded at boot once the owned file
// overrides it.
func (c *Checker) ownedMerge(obs *Observation) (src ownedSource, m MergeResult, err error) {
	src, err = c.ownedSource()
	if err != nil || src.link != "" {
		return src, MergeResult{}, err
	}
	var existing []byte
	if f, err := openDeclarations(c.cfg.Root, src.from, limitOwnedDeclarationFile); err != nil {
		return src, MergeResult{}, err
	} else if f != nil {
		existing, err = hostfs.ReadAll(f)
		f.Close()
		if err != nil {
			return src, MergeResult{}, fmt.Errorf("reading %w", err)
		}
	}
	var want []string
	for _, f := range obs.Findings {
		if f.wanted && !f.Builtin && (f.Available || obs.Index.DepMissing && !obs.NoModuleSupport) && f.BootBlocked == "" {
			want = append(want, f.Module)
		}
	}
	stale := map[string]string{}
	for _, f := range obs.Findings {
		if f.Stale && contains(f.DeclaredIn, src.from) {
			stale[f.Module] = "not in kernel " + obs.Release
		}
	}
	m = MergeDeclarations(existing, want, stale)
	if int64(len(m.Content)) > limitOwnedDeclarationFile.Max-512 { // room for the header below
		return src, MergeResult{}, fmt.Errorf("merging %s: the result would be larger than the %s: %w", c.cfg.Root.Path(src.from), limitOwnedDeclarationFile, hostfs.ErrTooLarge)
	}
	if src.from != c.cfg.DeclarationFile {
		head := fmt.Sprintf("# ipvs-guard: started from %s, which this file overrides (systemd-modules-load reads one file of a name).\n", src.from)
		m.Content = append([]byte(head), m.Content...)
		m.Changed = true
	}
	return src, m, nil
}

func (c *Checker) remediate(ctx context.Context, obs *Observation) (actions, failures []string) {
	log := klog.FromContext(ctx)
	if src, m, err := c.ownedMerge(obs); err != nil {
		failures = append(failures, err.Error())
	} else if src.link != "" {
		if !obs.declaredEverywhere() {
			failures = append(failures, fmt.Sprintf("did not write %s: it is a symbolic link to %s (a link to /dev/null masks it); ipvs-guard writes only a regular file it owns", c.cfg.DeclarationFile, src.link))
		}
	} else if m.Changed {
		if err := c.cfg.Root.WriteFileAtomic(c.cfg.DeclarationFile, m.Content, 0o644); err != nil {
			failures = append(failures, fmt.Sprintf("could not write %s: %v", c.cfg.DeclarationFile, rootCause(err)))
			log.Error(err, "Writing the module declaration file failed")
		} else {
			var what []string
			if src.from != c.cfg.DeclarationFile {
				what = append(what, "started from "+src.from)
			}
			if len(m.Added) > 0 {
				what = append(what, "declared "+strings.Join(m.Added, ", "))
			}
			if len(m.CommentedOut) > 0 {
				what = append(what, "commented out "+strings.Join(m.CommentedOut, ", ")+" (not in kernel "+obs.Release+")")
			}
			act := fmt.Sprintf("wrote %s: %s", c.cfg.DeclarationFile, strings.Join(what, "; "))
			actions = append(actions, act)
			check.Record(ctx, act)
			log.Info("Wrote module declaration file", "file", c.cfg.DeclarationFile, "from", src.from, "added", m.Added, "commentedOut", m.CommentedOut)
		}
	}
	var toLoad []string
	for _, f := range obs.Findings {
		if !f.wanted || f.Loaded || !(f.Available || obs.Index.DepMissing && !obs.NoModuleSupport) {
			continue
		}
		if f.BootBlocked != "" && len(f.LoadedAsDependencyOf) > 0 {
			// Not loaded by its name (that would load the alias's target);
			// loading the modules that need it loads it, as kmod does.
			continue
		}
		if f.BootBlocked != "" {
			// The administrator's modprobe.d says no: say so, never override it.
			failures = append(failures, fmt.Sprintf("did not load %s: %s", f.Module, f.BootBlocked))
			log.Info("Not loading a module modprobe.d blocks", "module", f.Module, "why", f.BootBlocked)
			continue
		}
		toLoad = append(toLoad, f.Module)
	}
	if len(toLoad) == 0 {
		return actions, failures
	}
	loader := c.cfg.Loader
	if loader == nil {
		nl, err := nativeLoaderFor(c.cfg.Root, obs.Index)
		if err != nil {
			failures = append(failures, fmt.Sprintf("did not load %s: %v", strings.Join(toLoad, ", "), err))
			return actions, failures
		}
		loader = nl
	}
	inserted, err := loader.Load(ctx, toLoad) // records each insertion itself
	if len(inserted) > 0 {
		actions = append(actions, "loaded "+strings.Join(inserted, ", "))
		log.Info("Loaded kernel modules", "module", inserted)
	}
	if err != nil {
		failures = append(failures, strings.ReplaceAll(err.Error(), "\n", "; "))
		log.Error(err, "Loading kernel modules failed")
	}
	return actions, failures
}

// result turns an observation into the check result.
func (c *Checker) result(obs *Observation) check.Result {
	res := check.Result{Name: check.NameModules}
	for _, f := range obs.Findings {
		res.Findings = append(res.Findings, f)
	}
	p := obs.problems()
	var msgs []string
	switch {
	case len(p.notInKernel) > 0 && obs.NoModuleSupport:
		res.Reason = ReasonModuleNotInKernel
		msgs = append(msgs, fmt.Sprintf("Kernel %s has no module support (no /proc/modules) and does not build %s in: IPVS mode is impossible on this kernel.", obs.Release, describe(p.notInKernel)))
	case len(p.notInKernel) > 0:
		res.Reason = ReasonModuleNotInKernel
		msgs = append(msgs, fmt.Sprintf("%s %s not available for kernel %s (not in modules.dep or modules.builtin).", describe(p.notInKernel), isAre(p.notInKernel), obs.Release))
	}
	if len(p.notLoaded) > 0 {
		if res.Reason == "" {
			res.Reason = ReasonModulesNotLoaded
		}
		m := fmt.Sprintf("%s %s not loaded: kube-proxy cannot run in IPVS mode without %s.", describe(p.notLoaded), isAre(p.notLoaded), itThem(p.notLoaded))
		if p.availabilityUnknown {
			m += fmt.Sprintf(" Whether kernel %s ships %s is unknown: %s is missing (mount the host's /lib/modules).", obs.Release, itThem(p.notLoaded), obs.Index.Dir+"/modules.dep")
		}
		msgs = append(msgs, m)
	}
	for _, f := range p.blocked {
		if res.Reason == "" || res.Reason == ReasonModulesNotLoaded {
			// modprobe.d is why it is not loaded: the cause is the reason.
			res.Reason = ReasonModuleBlocked
		}
		if len(f.LoadedAsDependencyOf) > 0 {
			msgs = append(msgs, fmt.Sprintf("%s is not loaded by its name: %s; ipvs-guard does not declare it, and it is loaded only as a dependency of %s (at boot and by --fix: dependencies load by their modules.dep path, not through aliases).", f.Module, f.BootBlocked, describe(f.LoadedAsDependencyOf)))
			continue
		}
		msgs = append(msgs, fmt.Sprintf("%s is not loaded at boot: %s; ipvs-guard neither declares nor loads it.", f.Module, f.BootBlocked))
	}
	if len(p.notPersisted) > 0 {
		if res.Reason == "" {
			res.Reason = ReasonModulesNotPersisted
		}
		msgs = append(msgs, fmt.Sprintf("%s %s not declared for boot in any modules-load.d *.conf file or /etc/modules: a reboot loses %s.", describe(p.notPersisted), isAre(p.notPersisted), itThem(p.notPersisted)))
	}
	for _, f := range p.stale {
		if res.Reason == "" {
			res.Reason = ReasonStaleModuleDeclaration
		}
		msgs = append(msgs, fmt.Sprintf("Stale declaration: %s is declared in %s but kernel %s does not have it (systemd-modules-load fails on it).", f.Module, describe(f.DeclaredIn), obs.Release))
	}
	if res.Reason == "" {
		res.Status = check.StatusOK
		res.Reason = ReasonModulesReady
		res.Message = fmt.Sprintf("%s are loaded and declared for boot (kernel %s).", describe(obs.Desired), obs.Release)
		return res
	}
	res.Status = check.StatusProblem
	res.Message = strings.Join(msgs, " ")
	if obs.NoModuleSupport && len(p.notInKernel) > 0 {
		// Nothing can be loaded or declared: no modprobe, no modules-load.d.
		res.Remediation = []check.Step{{fmt.Sprintf("Run kube-proxy in nftables or iptables mode on this node, or boot a kernel with module support or with %s built in (CONFIG_IP_VS=y and its schedulers).", describe(p.notInKernel))}}
		return res
	}
	res.Remediation = c.remediation(obs, p)
	return res
}

// withoutBlocked returns names without the modules of blocked.
func withoutBlocked(names []string, blocked []Finding) []string {
	var out []string
	for _, n := range names {
		b := false
		for _, f := range blocked {
			b = b || f.Module == n
		}
		if !b {
			out = append(out, n)
		}
	}
	return out
}

func itThem(names []string) string {
	if len(names) == 1 {
		return "it"
	}
	return "them"
}

// remediation words the exact fix.
func (c *Checker) remediation(obs *Observation, p problems) []check.Step {
	var out []check.Step
	d := c.cfg.Distro
	if d == "" {
		d = distro.Detect(c.cfg.Root)
	}
	if len(p.notInKernel) > 0 {
		var shipped []string
		for _, n := range obs.Index.namesWithPrefix("ip_vs_") {
			if s, ok := strings.CutPrefix(n, "ip_vs_"); ok && isScheduler(s) {
				shipped = append(shipped, s)
			}
		}
		for n := range obs.Index.Builtin {
			if s, ok := strings.CutPrefix(n, "ip_vs_"); ok && isScheduler(s) && !contains(shipped, s) {
				shipped = append(shipped, s)
			}
		}
		sort.Strings(shipped)
		var scheds, others []string
		for _, m := range p.notInKernel {
			if m == SchedulerModule(obs.Scheduler) && !contains(baseModules, m) {
				scheds = append(scheds, m)
			} else {
				others = append(others, m)
			}
		}
		var line string
		if len(others) > 0 {
			line = fmt.Sprintf("Kernel %s does not ship %s: install the kernel's extra modules package (e.g. Ubuntu linux-modules-extra-%s) or boot a kernel with CONFIG_IP_VS", obs.Release, describe(p.notInKernel), obs.Release)
		} else {
			line = fmt.Sprintf("Kernel %s has no IPVS scheduler %q (%s)", obs.Release, strings.TrimPrefix(scheds[0], "ip_vs_"), scheds[0])
		}
		if len(shipped) > 0 {
			line += fmt.Sprintf("; set kube-proxy's IPVS scheduler to one this kernel ships: %s", strings.Join(shipped, ", "))
		}
		out = append(out, check.Step{line + "."})
	}
	src, m, err := c.ownedMerge(obs)
	if err == nil && src.link != "" && !obs.declaredEverywhere() {
		out = append(out, check.Step{fmt.Sprintf("%s is a symbolic link to %s, which ipvs-guard neither reads nor writes through: replace it with a regular file, or declare the modules in another modules-load.d file.", c.cfg.DeclarationFile, src.link)})
	} else if err == nil && m.Changed {
		out = append(out, declarationStep(c.cfg.DeclarationFile, m))
	}
	for _, f := range p.blocked {
		out = append(out, check.Step{fmt.Sprintf("%s: %s. kube-proxy's IPVS mode needs it: remove or change that modprobe.d line on every node (ipvs-guard does not override modprobe.d), then run ipvs-guard diagnose --fix.", f.Module, f.BootBlocked)})
	}
	if loadable := withoutBlocked(p.notLoaded, p.blocked); len(loadable) > 0 {
		out = append(out, check.Step{fmt.Sprintf("Load them now, as root on the node: ipvs-guard diagnose --fix (or by hand: modprobe -a %s).", strings.Join(loadable, " "))})
	}
	for _, f := range p.stale {
		for _, file := range f.DeclaredIn {
			if file != c.cfg.DeclarationFile {
				out = append(out, check.Step{fmt.Sprintf("Remove or comment out %s in %s: kernel %s does not have it (ipvs-guard leaves files it does not own to their owner).", f.Module, file, obs.Release)})
			}
		}
	}
	if len(p.notLoaded) > 0 || len(p.notPersisted) > 0 {
		out = append(out, check.Step{distroModuleHint(d)})
	}
	return out
}

// maxShownDeclarationLines: a declaration file of more lines is not shown
// whole in the remediation (a report is read by a person, and holding it
// all costs memory); its changes are.
const maxShownDeclarationLines = 100

// declarationStep words the declaration file's fix: its whole new content
// when short, else what the merge adds and comments out.
func declarationStep(file string, m MergeResult) check.Step {
	if n := bytes.Count(m.Content, []byte("\n")); n > maxShownDeclarationLines {
		step := check.Step{fmt.Sprintf("Declare the modules for boot on every node: ipvs-guard diagnose --fix rewrites %s (%d lines, every other line kept as written), adding these lines:", file, n)}
		step = append(step, m.Added...)
		if len(m.CommentedOut) > 0 {
			step = append(step, "and commenting out the lines declaring "+strings.Join(m.CommentedOut, ", ")+".")
		}
		return step
	}
	step := check.Step{fmt.Sprintf("Declare the modules for boot on every node: %s must read (ipvs-guard diagnose --fix writes it, keeping every other line):", file)}
	return append(step, strings.Split(strings.TrimRight(strings.ReplaceAll(string(m.Content), "\r", ""), "\n"), "\n")...)
}

// isScheduler reports whether an ip_vs_<s> module is a scheduler (not a
// protocol helper or persistence engine).
func isScheduler(s string) bool {
	switch s {
	case "ftp", "pe_sip":
		return false
	}
	return !strings.HasPrefix(s, "pe_")
}

// distroModuleHint says where the module fix goes on each distribution.
func distroModuleHint(d distro.Distro) string {
	switch d {
	case distro.RKE2:
		return "RKE2: kube-proxy runs as a static pod whose image has no modprobe and no /lib/modules mount, so it cannot load modules itself: put the file on every node (servers and agents), load the modules on the host, then restart kube-proxy (systemctl restart rke2-server, or rke2-agent on agents)."
	case distro.RKE1:
		return "RKE1: the kube-proxy container has no modprobe, so it cannot load modules itself: put the file on every node's host, load the modules there, then restart kube-proxy (docker restart kube-proxy)."
	case distro.Kubeadm:
		return "kubeadm: put the file on every node (before kubeadm init/join on new ones) and load the modules on the host, then restart kube-proxy: kubectl -n kube-system rollout restart daemonset kube-proxy."
	}
	return "Put the file on every node that runs kube-proxy and load the modules on the host (kube-proxy images usually lack modprobe), then restart kube-proxy."
}

// rootCause drops path decoration (temporary file names) from a file error.
func rootCause(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

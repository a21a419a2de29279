// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// Reasons of the nftables-prerequisites check (stable: reasons of the
// KubeProxyDataplaneDegraded condition), in the order a result picks its
// reason when it has findings of several kinds.
const (
	// ReasonPrerequisitesMet: the kernel loads every module kube-proxy's
	// nftables rules need, now and after the next boot.
	ReasonPrerequisitesMet = "NFTablesPrerequisitesMet"
	// ReasonPrerequisitesNotNFTables: kube-proxy runs in another mode.
	ReasonPrerequisitesNotNFTables = "NFTablesNotInUse"
	// ReasonModulesDisabled: kernel.modules_disabled is 1 and a needed
	// module is not loaded.
	ReasonModulesDisabled = "NFTablesModulesDisabled"
	// ReasonModuleNotInKernel: a needed module is not loaded and the
	// kernel's module index does not ship it.
	ReasonModuleNotInKernel = "NFTablesModuleNotInKernel"
	// ReasonModuleBlocked: modprobe.d (or the kernel command line) stops
	// the kernel from loading a needed module, now or after the next boot.
	ReasonModuleBlocked = "NFTablesModuleBlocked"
)

// Kinds of the nftables-prerequisites check's findings (JSON "kind").
const (
	// PrereqModulesDisabled: kernel.modules_disabled stops a needed module.
	PrereqModulesDisabled = "modules-disabled"
	// PrereqNotInKernel: the kernel does not ship a needed module.
	PrereqNotInKernel = "module-not-in-kernel"
	// PrereqBlocked: a modprobe.d line blocks a needed module.
	PrereqBlocked = "module-blocked"
)

// Prerequisite is one finding of the nftables-prerequisites check: a module
// kube-proxy's nftables rules need that the kernel does not (or, after the
// next boot, will not) load.
type Prerequisite struct {
	// Kind is one of the Prereq* constants.
	Kind string `json:"kind"`
	// Module is the needed module.
	Module string `json:"module"`
	// Loaded is true when the module is loaded now (a block then bites at
	// the next boot).
	Loaded bool `json:"loaded"`
	// File is the modprobe.d or sysctl.d file that holds Line.
	File string `json:"file,omitempty"`
	// Line is the line that blocks it ("blacklist nft_numgen").
	Line string `json:"line,omitempty"`
}

// String renders the finding as one report line.
func (p Prerequisite) String() string {
	s := p.Kind + " " + p.Module
	if p.Loaded {
		s += " (loaded now)"
	}
	if p.Line != "" {
		s += fmt.Sprintf(": %q in %s", p.Line, p.File)
	}
	return s
}

// State implements check.Finding: the check's status is its metric.
func (Prerequisite) State() check.State { return check.State{} }

// PrerequisitesConfig builds the nftables-prerequisites check.
type PrerequisitesConfig struct {
	// Host reads the node (HostSources): Loaded, BuiltIn,
	// ModulesDisabled, ModulesDisabledBy, Modprobe and Ships are used.
	Host Host
	// Mode returns the mode kube-proxy runs in (its /proxyMode).
	Mode func(ctx context.Context) (string, error)
}

// PrerequisitesChecker is the nftables-prerequisites check: while kube-proxy
// runs in nftables mode, the kernel side the readiness report proved before
// the switch (docs/design.md §3c): every module kube-proxy's rules need
// (ExprModules, nf_conntrack included) is loaded or built in, or the kernel
// can load it — shipped by its module index, not blocked by modprobe.d, not
// stopped by kernel.modules_disabled — and a loaded one is not blocked for
// the next boot.
type PrerequisitesChecker struct {
	cfg PrerequisitesConfig
	// mode is kube-proxy's mode, the last one it reported while it does
	// not answer.
	mode kubeproxy.LastMode
}

var _ check.Checker = (*PrerequisitesChecker)(nil)

// NewPrerequisitesChecker returns the nftables-prerequisites check.
func NewPrerequisitesChecker(cfg PrerequisitesConfig) (*PrerequisitesChecker, error) {
	if cfg.Mode == nil {
		return nil, errors.New("nftables-prerequisites checker: Mode is required")
	}
	return &PrerequisitesChecker{cfg: cfg, mode: kubeproxy.LastMode{Read: cfg.Mode}}, nil
}

// Name implements check.Checker.
func (c *PrerequisitesChecker) Name() string { return check.NameNFTablesPrerequisites }

// Run implements check.Checker.
func (c *PrerequisitesChecker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", c.Name())
	mode, err := c.mode.Mode(klog.NewContext(ctx, logger))
	if errors.Is(err, kubeproxy.ErrUnreachable) {
		return check.Skipped(c.Name(), kubeproxy.ReasonUnreachable, "kube-proxy's metrics port refuses connections: its mode is unknown, the nftables prerequisites are not judged"), nil
	}
	if err != nil {
		return check.Result{}, err
	}
	if mode != kubeproxy.ModeNFTables {
		return check.Skipped(c.Name(), ReasonPrerequisitesNotNFTables, fmt.Sprintf("kube-proxy runs in %s mode: the nftables prerequisites do not apply", mode)), nil
	}
	found, steps, err := c.judge()
	if err != nil {
		return check.Result{}, err
	}
	return prerequisitesResult(found, steps), nil
}

// judge reads the node and returns what stops a needed module.
func (c *PrerequisitesChecker) judge() ([]Prerequisite, []check.Step, error) {
	h := c.cfg.Host
	if h.Loaded == nil {
		return nil, nil, nil
	}
	loaded, err := h.Loaded()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the loaded modules: %w", err)
	}
	if loaded == nil {
		return nil, nil, nil // no loadable modules: what the kernel has is built in
	}
	var builtin map[string]bool
	if h.BuiltIn != nil {
		builtin, _ = h.BuiltIn() // unknown: a loaded module is then judged as a module
	}
	missing := MissingModules(loaded)
	var found []Prerequisite
	var steps []check.Step
	if h.ModulesDisabled != nil && len(missing) > 0 {
		d, err := h.ModulesDisabled()
		if err != nil {
			return nil, nil, err
		}
		if d {
			for _, m := range missing {
				found = append(found, Prerequisite{Kind: PrereqModulesDisabled, Module: m})
			}
			steps = append(steps, ModulesDisabledFix(h, missing))
		}
	}
	if absent, _ := NotShipped(h, missing); len(absent) > 0 {
		for _, m := range absent {
			found = append(found, Prerequisite{Kind: PrereqNotInKernel, Module: m})
		}
		steps = append(steps, check.Step{fmt.Sprintf("Install the running kernel's full modules package (it ships %s), or boot a kernel built with it (the distribution's current kernel and its modules, both installed).", strings.Join(absent, ", "))})
	}
	if h.Modprobe != nil {
		conf, err := h.Modprobe()
		if err != nil {
			return nil, nil, fmt.Errorf("reading modprobe.d: %w", err)
		}
		for _, b := range BlockedModules(conf) {
			if builtin[b.Module] {
				continue // a blacklist or install command does not touch a built-in module
			}
			found = append(found, Prerequisite{Kind: PrereqBlocked, Module: b.Module, Loaded: loaded[b.Module], File: b.File, Line: b.Line})
			steps = append(steps, b.Fix())
		}
	}
	return found, steps, nil
}

// prerequisitesResult words the result: the reason of the first kind found
// in the Reason* order, one sentence per kind naming the modules, their
// files and lines, and nothing that changes while the fault lasts.
func prerequisitesResult(found []Prerequisite, steps []check.Step) check.Result {
	res := check.Result{Name: check.NameNFTablesPrerequisites, Remediation: steps}
	for _, f := range found {
		res.Findings = append(res.Findings, f)
	}
	if len(found) == 0 {
		res.Status, res.Reason = check.StatusOK, ReasonPrerequisitesMet
		res.Message = "kube-proxy runs in nftables mode and the kernel loads every module its rules need (nf_tables expressions and conntrack), now and after the next boot."
		return res
	}
	res.Status = check.StatusProblem
	byKind := map[string][]Prerequisite{}
	for _, f := range found {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	var msgs []string
	if fs := byKind[PrereqModulesDisabled]; len(fs) > 0 {
		res.Reason = ReasonModulesDisabled
		msgs = append(msgs, fmt.Sprintf("kernel.modules_disabled is 1 and %s not loaded: the kernel cannot load %s until reboot, and kube-proxy's nftables rules need %s.", isAre(fs), them(fs), them(fs)))
	}
	if fs := byKind[PrereqNotInKernel]; len(fs) > 0 {
		if res.Reason == "" {
			res.Reason = ReasonModuleNotInKernel
		}
		msgs = append(msgs, fmt.Sprintf("The running kernel does not ship %s (neither in modules.dep nor built in), which kube-proxy's nftables rules need.", names(fs)))
	}
	if fs := byKind[PrereqBlocked]; len(fs) > 0 {
		if res.Reason == "" {
			res.Reason = ReasonModuleBlocked
		}
		for _, f := range fs {
			what := "the kernel does not load it"
			if f.Loaded {
				what = "it is loaded now, but the kernel will not load it after the next boot"
			}
			msgs = append(msgs, fmt.Sprintf("%s, which kube-proxy's nftables rules need, is blocked by %q in %s: %s.", f.Module, f.Line, f.File, what))
		}
	}
	res.Message = strings.Join(msgs, " ")
	return res
}

// names joins the findings' modules.
func names(fs []Prerequisite) string {
	ns := make([]string, len(fs))
	for i, f := range fs {
		ns[i] = f.Module
	}
	return strings.Join(ns, ", ")
}

func isAre(fs []Prerequisite) string {
	if len(fs) == 1 {
		return names(fs) + " is"
	}
	return names(fs) + " are"
}

func them(fs []Prerequisite) string {
	if len(fs) == 1 {
		return "it"
	}
	return "them"
}

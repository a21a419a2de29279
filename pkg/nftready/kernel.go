// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// The kernel side of kube-proxy's nftables mode, shared by the readiness
// report (before the switch) and the nftables-prerequisites check (while
// kube-proxy runs in nftables mode): which modules its rules need, which of
// them are not in the kernel, which the kernel's module index does not ship
// and which modprobe.d stops the kernel from loading.

// NeededModules returns every module ExprModules names, in probe order,
// each once.
func NeededModules() []string {
	var out []string
	for _, e := range Expressions {
		for _, m := range ExprModules[e] {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// dependencyOnly are the needed modules the kernel never asks for by name
// or alias: each is loaded as a modules.dep dependency of another one
// (nf_conntrack of nft_ct, nf_nat of nft_chain_nat and nft_nat, nft_fib of
// nft_fib_ipv4, nft_reject of nft_reject_ipv4). kmod applies a blacklist to
// the module an alias resolves to, never to its dependencies (`modprobe -n
// -v nft-expr-ct` with "blacklist nf_conntrack" still inserts
// nf_conntrack.ko): a blacklist does not stop these, an install command does.
var dependencyOnly = map[string]bool{"nf_conntrack": true, "nf_nat": true, "nft_fib": true, "nft_reject": true}

// MissingModules returns the needed modules neither loaded nor built in,
// in NeededModules order; none when loaded is nil (no loadable modules:
// everything the kernel has is built in).
func MissingModules(loaded map[string]bool) []string {
	if loaded == nil {
		return nil
	}
	var out []string
	for _, m := range NeededModules() {
		if !loaded[m] {
			out = append(out, m)
		}
	}
	return out
}

// ModuleBlock is a modprobe.d line that stops the kernel from loading a
// module kube-proxy's nftables rules need.
type ModuleBlock struct {
	// Module is the needed module.
	Module string
	// File is the modprobe.d file holding Line (or /proc/cmdline for
	// modprobe.blacklist=).
	File string
	// Line is the directive as written: "blacklist nft_numgen",
	// "install nft_numgen /bin/false".
	Line string
	// Install is true for an install command, false for a blacklist.
	Install bool
	// Cmdline is true for a blacklist on the kernel command line
	// (modprobe.blacklist=, Line), which only a reboot with another
	// command line lifts.
	Cmdline bool
}

// BlockedModules returns the needed modules conf stops the kernel from
// loading, in NeededModules order: a blacklist (which autoloading through an
// alias honours) of a module the kernel asks for by alias, or an install
// command that replaces loading it.
func BlockedModules(conf *modules.ModprobeConfig) []ModuleBlock {
	if conf == nil {
		return nil
	}
	var out []ModuleBlock
	for _, m := range NeededModules() {
		switch cmd, install := conf.ReplacesLoading(m); {
		case conf.Blacklist[m] && !dependencyOnly[m]:
			b := ModuleBlock{Module: m, File: conf.BlacklistFile[m], Line: "blacklist " + m}
			if strings.HasPrefix(b.File, modules.KernelCmdline) {
				b.Line, b.Cmdline = "modprobe.blacklist="+m, true
			}
			out = append(out, b)
		case install:
			out = append(out, ModuleBlock{Module: m, File: conf.InstallFile[m], Line: "install " + m + " " + cmd, Install: true})
		}
	}
	return out
}

// NotShipped returns which of names the kernel's module index (h.Ships)
// says the kernel does not ship, neither as a file nor built in; known is
// false when it cannot tell (no Ships, no modules.dep, an unreadable index).
func NotShipped(h Host, names []string) (absent []string, known bool) {
	if h.Ships == nil {
		return nil, false
	}
	ships, err := h.Ships()
	if err != nil || ships == nil {
		return nil, false
	}
	for _, m := range names {
		if !ships(m) {
			absent = append(absent, m)
		}
	}
	return absent, true
}

// Fix is the step that lifts the block.
func (b ModuleBlock) Fix() check.Step {
	if b.Cmdline {
		return check.Step{fmt.Sprintf("Remove %s from modprobe.blacklist= on the kernel command line (the boot loader's configuration, e.g. GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub) and reboot.", b.Module)}
	}
	return check.Step{fmt.Sprintf("Remove the line %q from %s.", b.Line, b.File)}
}

// ModulesDisabledFix is the step for kernel.modules_disabled=1 while
// needed modules are missing: it cannot be undone until reboot, so the
// modules must load before it is set, or the setting go. It names the
// sysctl.d files that set it when h tells them.
func ModulesDisabledFix(h Host, missing []string) check.Step {
	where := "remove the setting from /etc/sysctl.d"
	if h.ModulesDisabledBy != nil {
		if files := h.ModulesDisabledBy(); len(files) > 0 {
			where = "remove the line kernel.modules_disabled = 1 from " + strings.Join(files, ", ")
		}
	}
	return check.Step{"kernel.modules_disabled=1 cannot be undone until reboot: load the nf_tables modules before it is set (list them in a modules-load.d file, e.g. /etc/modules-load.d/nftables.conf:", strings.Join(missing, " ") + ")", "or " + where + " and reboot."}
}

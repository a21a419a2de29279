// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"fmt"
	"strings"
)

// DefaultScheduler is the IPVS scheduler kube-proxy uses when none is configured.
const DefaultScheduler = "rr"

// Conntrack module names: kernels before 4.19 ship nf_conntrack_ipv4 (which
// kube-proxy asks for there); later ones fold it into nf_conntrack.
const (
	ConntrackModule     = "nf_conntrack"
	ConntrackIPv4Module = "nf_conntrack_ipv4"
)

// baseModules are loaded for every scheduler: kube-proxy's IPVS proxier checks
// for them before it starts. IPv6 (dual-stack) needs no module of its own:
// ip_vs carries both families (CONFIG_IP_VS_IPV6=y in distribution kernels)
// and depends on nf_defrag_ipv6, which loading it pulls in; kube-proxy asks
// for no IPv6-specific module either.
var baseModules = []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"}

// Normalize returns the canonical form of a module name: '-' becomes '_', as
// the kernel and kmod treat the two as the same character in module names.
func Normalize(name string) string {
	return strings.ReplaceAll(strings.TrimSpace(name), "-", "_")
}

// SchedulerModule returns the module that implements IPVS scheduler s
// ("lc" → "ip_vs_lc"); an empty scheduler means DefaultScheduler.
func SchedulerModule(s string) string {
	s = Normalize(strings.ToLower(s))
	if s == "" {
		s = DefaultScheduler
	}
	return "ip_vs_" + s
}

// Shipper reports whether the running kernel ships a module (in modules.dep
// or modules.builtin). *Index implements it.
type Shipper interface {
	// Ships reports whether the kernel has module name, loadable or built in.
	Ships(name string) bool
}

// ConntrackFor returns the conntrack module this kernel ships:
// nf_conntrack_ipv4 when the kernel still has it, else nf_conntrack. It is
// decided from the kernel's module files, never from the version number.
func ConntrackFor(k Shipper) string {
	if k != nil && k.Ships(ConntrackIPv4Module) {
		return ConntrackIPv4Module
	}
	return ConntrackModule
}

// Desired returns the modules kube-proxy's IPVS mode needs on this kernel, in
// load order and without duplicates: ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh,
// ip_vs_<scheduler> and the conntrack module the kernel ships.
func Desired(scheduler string, k Shipper) []string {
	out := append([]string(nil), baseModules...)
	if m := SchedulerModule(scheduler); !contains(out, m) {
		out = append(out, m)
	}
	return append(out, ConntrackFor(k))
}

// isIPVSRelated reports whether a module name belongs to the IPVS/conntrack
// family whose stale declarations this package reports and repairs.
func isIPVSRelated(name string) bool {
	return strings.HasPrefix(name, "ip_vs") || strings.HasPrefix(name, "nf_conntrack")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// KnownSchedulers are the IPVS schedulers of mainline Linux
// (net/netfilter/ipvs/ip_vs_<name>.c).
var KnownSchedulers = []string{"dh", "fo", "lblc", "lblcr", "lc", "mh", "nq", "ovf", "rr", "sed", "sh", "twos", "wlc", "wrr"}

// nonSchedulers are ip_vs_* modules that are not schedulers: application
// helpers and persistence engines. Naming one as the scheduler would
// declare it for boot.
var nonSchedulers = []string{"ftp", "sip", "pe_sip", "pe"}

// ValidateScheduler checks an IPVS scheduler name before it becomes a module
// name (ip_vs_<name>). A name is valid when it could be one of the kernel's
// schedulers: 1 to 15 characters (IP_VS_SCHEDNAME_MAXLEN is 16 with the
// NUL) of lower-case letters and digits, starting with a letter, and not an
// IPVS helper module such as ftp. A well-formed name the running kernel
// lacks ("nosuch") is valid here: it is a finding of the modules check
// (ip_vs_nosuch not in kernel), as a newer kernel may ship a scheduler this
// list does not know.
func ValidateScheduler(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > 15 {
		return fmt.Errorf("IPVS scheduler %q: %d characters, the kernel's names have at most 15 (one of %s)", truncate(s, 32), len(s), strings.Join(KnownSchedulers, ", "))
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("IPVS scheduler %q: not a scheduler name (lower-case letters and digits; one of %s)", s, strings.Join(KnownSchedulers, ", "))
		}
	}
	if contains(nonSchedulers, s) {
		return fmt.Errorf("IPVS scheduler %q: ip_vs_%s is an IPVS helper module, not a scheduler (one of %s)", s, s, strings.Join(KnownSchedulers, ", "))
	}
	return nil
}

// truncate shortens s to at most n bytes for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

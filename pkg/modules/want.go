// SPDX-License-Identifier: Apache-2.0

package modules

import (
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

// SPDX-License-Identifier: Apache-2.0

package check

import "context"

// ReasonIPVSNotInUse is the reason of every IPVS-only check (modules,
// kube-proxy, ipvs, arp-sysctls) when kube-proxy is configured for and runs
// in a mode other than IPVS: the IPVS prerequisites do not apply (DESIGN
// §3b). Stable: it becomes the reason of the IPVS Node conditions (False).
const ReasonIPVSNotInUse = "IPVSNotInUse"

// IPVSUse says whether the IPVS prerequisites apply on this node, from what
// kube-proxy reports.
type IPVSUse struct {
	// Applies is true when kube-proxy is configured for IPVS, runs in IPVS
	// mode, or could not be asked (IPVS is then assumed).
	Applies bool
	// Mode is the mode kube-proxy reports it runs in ("" when unknown).
	Mode string
	// Assumed is true when kube-proxy could not be read fully just now and
	// the answer is an assumption (IPVS, or the mode it last reported):
	// nothing may be removed on it.
	Assumed bool
	// Unknown is true when nothing tells kube-proxy's mode now: not
	// kube-proxy, not the node's configuration, not the kernel's state.
	// Applies is then true so the checks report what they see, but
	// nothing may be loaded, declared or removed on it.
	Unknown bool
	// Message says why the prerequisites do not apply (Applies false), or
	// what was assumed (Applies true, kube-proxy not fully readable); empty
	// when kube-proxy was read and runs in IPVS mode or is configured for it.
	Message string
}

// IPVSUseFunc returns the IPVSUse of this node now; checks call it on every
// run, so a switch of kube-proxy's mode is seen at the next run.
type IPVSUseFunc func(ctx context.Context) IPVSUse

// NotInUse returns the skipped result of check name when the IPVS
// prerequisites do not apply: reason ReasonIPVSNotInUse, u.Message.
func (u IPVSUse) NotInUse(name string) Result {
	return Skipped(name, ReasonIPVSNotInUse, u.Message)
}

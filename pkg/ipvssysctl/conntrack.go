// SPDX-License-Identifier: Apache-2.0

package ipvssysctl

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// Reasons and advisories of the conntrack check.
const (
	ReasonConntrackOK          = "ConntrackOK"
	ReasonConntrackNearlyFull  = "ConntrackNearlyFull"
	ReasonConntrackFull        = "ConntrackTableFull"
	ReasonConntrackNotLoaded   = "ConntrackNotLoaded"
	AdvisoryConntrackNearlyFul = ReasonConntrackNearlyFull
	// NearlyFullRatio is the use above which the table is nearly full
	// (the alert's threshold too).
	NearlyFullRatio = 0.9
)

// Sysctls of the connection table.
const (
	SysctlConntrackCount = "net.netfilter.nf_conntrack_count"
	SysctlConntrackMax   = "net.netfilter.nf_conntrack_max"
)

// ConntrackFinding is the connection table's use.
type ConntrackFinding struct {
	// Entries is nf_conntrack_count.
	Entries int64 `json:"entries"`
	// Max is nf_conntrack_max.
	Max int64 `json:"max"`
	// Ratio is Entries / Max.
	Ratio float64 `json:"ratio"`
	// Severity is warning when the table is nearly full, "" otherwise.
	Severity string `json:"severity,omitempty"`
	// Advisory is ConntrackNearlyFull when it is, "" otherwise.
	Advisory string `json:"advisory,omitempty"`
}

// String renders the finding as one line.
func (f ConntrackFinding) String() string {
	s := fmt.Sprintf("conntrack table: %d of %d entries (%.1f%%)", f.Entries, f.Max, 100*f.Ratio)
	if f.Advisory != "" {
		s += ": " + f.Severity + " " + f.Advisory
	}
	return s
}

// State implements check.Finding.
func (f ConntrackFinding) State() check.State {
	st := check.State{Conntrack: &check.ConntrackState{Entries: float64(f.Entries), Max: float64(f.Max)}}
	if f.Advisory != "" {
		st.Advisory = &check.AdvisoryState{Check: check.NameConntrack, Advisory: f.Advisory, Severity: f.Severity}
	}
	return st
}

// ConntrackChecker is the conntrack check: nf_conntrack_count against
// nf_conntrack_max. Nearly full (≥ 90 %) is an advisory; full is a problem,
// as the kernel then drops packets of new connections ("nf_conntrack: table
// full, dropping packet", kubernetes#71261).
type ConntrackChecker struct {
	root hostfs.Root
	// distro words how a raised limit is kept (kube-proxy's settings, or
	// a sysctl.d file where kube-proxy leaves the limit to the OS).
	distro distro.Distro
}

var _ check.Checker = (*ConntrackChecker)(nil)

// NewConntrackChecker returns the conntrack checker for the host at root.
func NewConntrackChecker(root hostfs.Root) *ConntrackChecker {
	return &ConntrackChecker{root: root, distro: distro.Detect(root)}
}

// Name implements check.Checker.
func (c *ConntrackChecker) Name() string { return check.NameConntrack }

// Run implements check.Checker.
func (c *ConntrackChecker) Run(context.Context) (check.Result, error) {
	count, err := readSysctl(c.root, SysctlConntrackCount)
	if errors.Is(err, os.ErrNotExist) {
		return check.Skipped(c.Name(), ReasonConntrackNotLoaded, "nf_conntrack is not loaded: no connection table to watch"), nil
	}
	if err != nil {
		return check.Result{}, err
	}
	max, err := readSysctl(c.root, SysctlConntrackMax)
	if err != nil {
		return check.Result{}, err
	}
	return judgeConntrack(count, max, c.distro), nil
}

// JudgeConntrack judges the connection table's use on a node of unknown
// distribution.
func JudgeConntrack(count, max int64) check.Result { return judgeConntrack(count, max, distro.Unknown) }

// conntrackFix returns the steps that raise the limit to max and keep it.
// kube-proxy sets nf_conntrack_max at every start to conntrack.maxPerCore ×
// CPUs (at least conntrack.min) when maxPerCore > 0, overwriting a sysctl.d
// value (kube-proxy 1.37 pkg/proxy/conntrack/sysctls.go); RKE2 (k3s's agent)
// runs kube-proxy with conntrack-max-per-core=0, which leaves the limit to
// the OS, so there a sysctl.d file keeps it.
func conntrackFix(d distro.Distro, max int64) []check.Step {
	now := fmt.Sprintf("raise the limit now: `sysctl -w %s=%d`", SysctlConntrackMax, max)
	sysctlD := fmt.Sprintf("RKE2: kube-proxy runs with conntrack-max-per-core=0 and leaves the limit to the OS: keep it with a sysctl.d file, `echo '%s = %d' > /etc/sysctl.d/90-nf-conntrack.conf` (systemd-sysctl applies it at boot after systemd-modules-load has loaded nf_conntrack)", SysctlConntrackMax, max)
	kubeProxy := "kube-proxy sets the limit at every start to conntrack.maxPerCore × CPUs, at least conntrack.min (a sysctl.d value is overwritten): raise those in its configuration (kubeadm: the kube-proxy ConfigMap; RKE1: extra_args conntrack-max-per-core / conntrack-min)"
	cause := "find what opens so many connections: `conntrack -S`, `conntrack -L | awk '{print $1, $4}' | sort | uniq -c | sort -n`"
	switch d {
	case distro.RKE2:
		return []check.Step{{now, sysctlD}, {cause}}
	case distro.Kubeadm, distro.RKE1:
		return []check.Step{{now, kubeProxy}, {cause}}
	}
	return []check.Step{{now, "to keep it: " + kubeProxy + "; " + sysctlD}, {cause}}
}

// judgeConntrack judges the connection table's use on a node of
// distribution d.
func judgeConntrack(count, max int64, d distro.Distro) check.Result {
	f := ConntrackFinding{Entries: count, Max: max}
	if max > 0 {
		f.Ratio = float64(count) / float64(max)
	}
	res := check.Result{Name: check.NameConntrack, Status: check.StatusOK, Reason: ReasonConntrackOK, Findings: []check.Finding{}}
	fix := conntrackFix(d, 2*max)
	switch {
	case max > 0 && count >= max:
		f.Severity, f.Advisory = SeverityWarning, AdvisoryConntrackNearlyFul
		res.Status, res.Reason = check.StatusProblem, ReasonConntrackFull
		res.Message = fmt.Sprintf("the conntrack table is full (%d of %d entries): the kernel drops packets of new connections (\"nf_conntrack: table full, dropping packet\", kubernetes#71261)", count, max)
		res.Remediation = fix
	case max > 0 && f.Ratio >= NearlyFullRatio:
		f.Severity, f.Advisory = SeverityWarning, AdvisoryConntrackNearlyFul
		res.Reason = ReasonConntrackNearlyFull
		res.Message = fmt.Sprintf("the conntrack table is %.0f%% full (%d of %d entries): once full, the kernel drops packets of new connections (kubernetes#71261)", 100*f.Ratio, count, max)
		res.Remediation = fix
	default:
		res.Message = fmt.Sprintf("the conntrack table is %.0f%% full (%d of %d entries)", 100*f.Ratio, count, max)
	}
	res.Findings = append(res.Findings, f)
	return res
}

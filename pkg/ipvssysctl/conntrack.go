// SPDX-License-Identifier: Apache-2.0

package ipvssysctl

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
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
type ConntrackChecker struct{ root hostfs.Root }

var _ check.Checker = (*ConntrackChecker)(nil)

// NewConntrackChecker returns the conntrack checker for the host at root.
func NewConntrackChecker(root hostfs.Root) *ConntrackChecker { return &ConntrackChecker{root: root} }

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
	return JudgeConntrack(count, max), nil
}

// JudgeConntrack judges the connection table's use.
func JudgeConntrack(count, max int64) check.Result {
	f := ConntrackFinding{Entries: count, Max: max}
	if max > 0 {
		f.Ratio = float64(count) / float64(max)
	}
	res := check.Result{Name: check.NameConntrack, Status: check.StatusOK, Reason: ReasonConntrackOK, Findings: []check.Finding{}}
	fix := fmt.Sprintf("raise the limit: `sysctl -w %s=%d` (kube-proxy's conntrack.maxPerCore and conntrack.min set it at start; a sysctl.d file keeps it), or find what opens so many connections (`conntrack -S`, `conntrack -L | awk '{print $1, $4}' | sort | uniq -c | sort -n`)", SysctlConntrackMax, 2*max)
	switch {
	case max > 0 && count >= max:
		f.Severity, f.Advisory = SeverityWarning, AdvisoryConntrackNearlyFul
		res.Status, res.Reason = check.StatusProblem, ReasonConntrackFull
		res.Message = fmt.Sprintf("the conntrack table is full (%d of %d entries): the kernel drops packets of new connections (\"nf_conntrack: table full, dropping packet\", kubernetes#71261)", count, max)
		res.Remediation = check.Steps(fix)
	case max > 0 && f.Ratio >= NearlyFullRatio:
		f.Severity, f.Advisory = SeverityWarning, AdvisoryConntrackNearlyFul
		res.Reason = ReasonConntrackNearlyFull
		res.Message = fmt.Sprintf("the conntrack table is %.0f%% full (%d of %d entries): once full, the kernel drops packets of new connections (kubernetes#71261)", 100*f.Ratio, count, max)
		res.Remediation = check.Steps(fix)
	default:
		res.Message = fmt.Sprintf("the conntrack table is %.0f%% full (%d of %d entries)", 100*f.Ratio, count, max)
	}
	res.Findings = append(res.Findings, f)
	return res
}

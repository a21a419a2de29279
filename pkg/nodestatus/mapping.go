// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// Reasons the mapping uses when a check result carries none of its own.
const (
	// ReasonNotYetChecked: the check is enabled but has not finished a run yet.
	ReasonNotYetChecked = "NotYetChecked"
	// ReasonCheckPassed: the check ran and found nothing wrong.
	ReasonCheckPassed = "CheckPassed"
	// ReasonProblemFound: the check found a problem but gave no reason.
	ReasonProblemFound = "ProblemFound"
	// ReasonCheckFailed: the check could not run.
	ReasonCheckFailed = "CheckFailed"
	// ReasonNothingToCheck: the check was skipped and gave no reason.
	ReasonNothingToCheck = "NothingToCheck"
)

// maxMessageLen bounds a condition message in bytes, "…" included (the
// same message is the note of its Event, which events.k8s.io/v1 caps at
// 1 KiB); longer ones are cut with "…".
const maxMessageLen = 1024

// ChecksFor returns the check names whose results feed condition type t.
func ChecksFor(t ConditionType) []string {
	switch t {
	case IPVSModulesMissing:
		return []string{check.NameModules}
	case KubeProxyIPVSDegraded:
		return []string{check.NameKubeProxy, check.NameIPVS}
	case KubeProxyDataplaneDegraded:
		return []string{check.NameKubeProxySync, check.NameIPVSDataplane, check.NameNFTablesDataplane, check.NameNFTablesPrerequisites}
	case StrictARPDisabled:
		return []string{check.NameARPSysctls}
	case LoadBalancerARPFailing:
		return []string{check.NameARP}
	}
	return nil
}

// Conditions maps the latest check results to the owned Node conditions.
//
// enabled names the checks that run on this node; a condition type is
// published only when at least one of its checks is enabled (the Manager
// removes the others). results holds the latest result per check; an enabled
// check without a result yet yields Unknown/NotYetChecked. Per result:
//
//   - ok: False with the result's reason (default CheckPassed);
//   - problem: True with the result's reason (default ProblemFound);
//   - error: Unknown with the result's reason (default CheckFailed), because
//     the state of the node is not known;
//   - skipped: False with the result's reason (default NothingToCheck) and a
//     message starting "Nothing to check: ": a skipped check never makes the
//     node unhealthy (docs/design.md §8), and Unknown would page on every node
//     without LoadBalancer IPs.
//
// A condition fed by several checks (KubeProxyIPVSDegraded: kube-proxy and
// ipvs; KubeProxyDataplaneDegraded: kube-proxy-sync, ipvs-dataplane,
// nftables-dataplane and nftables-prerequisites) combines them: the worst
// status wins (problem > error > ok > skipped > not yet checked); its reason
// is the first such result's reason (in ChecksFor's order) and its message
// joins the messages of every result with that status.
func Conditions(results []check.Result, enabled []string) []Condition {
	byName := make(map[string]check.Result, len(results))
	for _, r := range results {
		byName[r.Name] = r
	}
	on := make(map[string]bool, len(enabled))
	for _, n := range enabled {
		on[n] = true
	}
	var out []Condition
	for _, t := range AllConditionTypes() {
		var rs []*check.Result
		var names []string
		for _, name := range ChecksFor(t) {
			if !on[name] {
				continue
			}
			names = append(names, name)
			if r, ok := byName[name]; ok {
				rs = append(rs, &r)
			} else {
				rs = append(rs, nil)
			}
		}
		if len(rs) == 0 {
			continue
		}
		out = append(out, combine(t, rs, names))
	}
	return out
}

// severity orders results for combining; higher is worse.
func severity(r *check.Result) int {
	if r == nil {
		return 0
	}
	switch r.Status {
	case check.StatusProblem:
		return 4
	case check.StatusError:
		return 3
	case check.StatusOK:
		return 2
	default:
		return 1
	}
}

func combine(t ConditionType, rs []*check.Result, names []string) Condition {
	worst := 0
	for _, r := range rs {
		worst = max(worst, severity(r))
	}
	var primary *check.Result
	var msgs []string
	for _, r := range rs {
		if severity(r) != worst || r == nil {
			continue
		}
		if primary == nil {
			primary = r
		}
		// The same message twice (both checks saying the IPVS
		// prerequisites do not apply) is said once.
		if m := strings.TrimSpace(r.Message); m != "" && !slices.Contains(msgs, m) {
			msgs = append(msgs, m)
		}
	}
	if primary == nil {
		return Condition{Type: t, Status: StatusUnknown, Reason: ReasonNotYetChecked,
			Message: "ipvs-guard has not finished checking " + joinAnd(names) + " yet."}
	}
	c := Condition{Type: t, Reason: primary.Reason, Message: strings.Join(msgs, " ")}
	switch primary.Status {
	case check.StatusProblem:
		c.Status = StatusTrue
		c.Reason = orDefault(c.Reason, ReasonProblemFound)
	case check.StatusError:
		c.Status = StatusUnknown
		c.Reason = orDefault(c.Reason, ReasonCheckFailed)
	case check.StatusOK:
		c.Status = StatusFalse
		c.Reason = orDefault(c.Reason, ReasonCheckPassed)
	default:
		c.Status = StatusFalse
		c.Reason = orDefault(c.Reason, ReasonNothingToCheck)
		c.Message = "Nothing to check: " + c.Message
	}
	// One line, like a line of the diagnose report: a file name or other
	// outside text with a line break or an escape sequence is escaped, so
	// kubectl describe, an Event's note and an alert show no forged line.
	c.Message = truncate(check.EscapeLine(strings.TrimSpace(c.Message)))
	return c
}

// joinAnd joins names as "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// truncate cuts s to at most maxMessageLen bytes, "…" included, at a rune
// boundary.
func truncate(s string) string {
	if len(s) <= maxMessageLen {
		return s
	}
	n := maxMessageLen - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

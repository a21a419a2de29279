// SPDX-License-Identifier: Apache-2.0

package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// Status is the outcome of one check run.
type Status string

const (
	// StatusOK means the check ran and found nothing wrong.
	StatusOK Status = "ok"
	// StatusProblem means the check ran and found a problem on the node.
	StatusProblem Status = "problem"
	// StatusError means the check could not run (infrastructure failure).
	StatusError Status = "error"
	// StatusSkipped means the check had nothing to look at; it never makes a run unhealthy.
	StatusSkipped Status = "skipped"
)

// Check names, stable: they appear in the JSON report, metrics labels and logs.
const (
	NameModules    = "modules"
	NameKubeProxy  = "kube-proxy"
	NameIPVS       = "ipvs"
	NameARPSysctls = "arp-sysctls"
	NameARP        = "arp"
	// NameIPVSDataplane compares the IPVS table with the cluster both ways.
	NameIPVSDataplane = "ipvs-dataplane"
	// NameKubeProxySync is kube-proxy's health in every proxy mode: its
	// sync freshness, failures and full-sync duration.
	NameKubeProxySync = "kube-proxy-sync"
	// NameNFTablesDataplane compares kube-proxy's nftables table with the
	// Services and EndpointSlices (iptables mode: its chains are present).
	NameNFTablesDataplane = "nftables-dataplane"
	// NameNFTablesPrerequisites keeps what the readiness report proved
	// before the switch true while kube-proxy runs in nftables mode: the
	// kernel still loads the modules its rules need (module index,
	// modprobe.d, kernel.modules_disabled), conntrack included.
	NameNFTablesPrerequisites = "nftables-prerequisites"
	// NameNFTablesReadiness is the advisory readiness report for kube-proxy's
	// nftables mode (diagnose --target-mode nftables; the agent's metrics).
	// It feeds no Node condition.
	NameNFTablesReadiness = "nftables-readiness"
	// NameIPVSLeftovers lists what IPVS mode left behind once kube-proxy
	// runs another mode. It feeds no Node condition.
	NameIPVSLeftovers = "ipvs-leftovers"
)

// Names of the advisory checks (docs/design.md §3b): they feed no Node condition.
const (
	// NameIPVSSysctls judges the IPVS sysctls and timeouts.
	NameIPVSSysctls = "ipvs-sysctls"
	// NameConntrack watches the netfilter connection table's use.
	NameConntrack = "conntrack"
)

// Finding is one observation of a check, rendered as a line in the text report,
// marshalled as an object in the JSON report and published as metrics through
// its [State].
type Finding interface {
	// String renders the finding as one human-readable line.
	String() string
	// State returns the typed state the finding publishes as metrics; the
	// zero State publishes nothing (the check's status is always published).
	State() State
}

// Result is what a check reports. Reason is a stable UpperCamelCase token
// (it becomes a Node condition reason); Message names the exact module, IP,
// MAC or sysctl and the fix.
type Result struct {
	// Name is the check's name, one of the Name* constants.
	Name string `json:"name"`
	// Status is the outcome.
	Status Status `json:"status"`
	// Reason is a stable UpperCamelCase token explaining Status.
	Reason string `json:"reason"`
	// Message is a human-readable sentence naming what is wrong and how to fix it.
	Message string `json:"message"`
	// Findings are the individual observations (one per module, IP, …).
	Findings []Finding `json:"findings"`
	// Remediation holds the exact fix, one step per entry (a command, a
	// sentence, a file's content), each step as its lines.
	Remediation []Step `json:"remediation"`
	// Actions lists what the check changed on the node when remediation was enabled.
	Actions []string `json:"actions,omitempty"`
}

// Checker is one check, shared by the agent loop and the diagnose command.
//
// Run observes the current state (and, when the checker was built with
// remediation enabled, repairs it and observes again) and returns the result.
// A non-nil error means the check could not run at all (an infrastructure
// failure such as EPERM on netlink or an unreadable /proc); findings on the
// node are never errors.
type Checker interface {
	// Name returns the check's stable name.
	Name() string
	// Run performs the check once.
	Run(ctx context.Context) (Result, error)
}

// Errored builds the Result for a check that could not run. When err
// carries changes the run made before it stopped (a [*PartialError]), they
// are the Result's Actions: what remediation did is never lost.
func Errored(name string, err error) Result {
	res := Result{
		Name:    name,
		Status:  StatusError,
		Reason:  "CheckFailed",
		Message: fmt.Sprintf("%s check could not run: %v", name, err),
	}
	if acts := ActionsOf(err); len(acts) > 0 {
		res.Actions = acts
	}
	return res
}

// actionsKey is the context key of a run's [actionLog].
type actionsKey struct{}

// actionLog collects what one run changed on the node, as it happens.
type actionLog struct {
	mu   sync.Mutex
	list []string
}

func (l *actionLog) add(a string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, a)
}

func (l *actionLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.list...)
}

// Record notes a change a check has just made on the node (a file written,
// a module loaded), in the words of Result.Actions, the moment it is made:
// should the run be interrupted before it returns its Result, [Bounded]
// reports these changes instead of losing them. A check still lists its
// changes in its Result's Actions (which may summarise them differently);
// Record is only read when there is no Result. Without a run of a Bounded
// check in ctx it does nothing.
func Record(ctx context.Context, action string) {
	if l, ok := ctx.Value(actionsKey{}).(*actionLog); ok {
		l.add(action)
	}
}

// PartialError is the error of a run that stopped before it returned a
// Result (interrupted, or failed) after it had changed the node: Actions
// are those changes, in the order the check recorded them ([Record]).
type PartialError struct {
	// Err is why the run stopped.
	Err error
	// Actions are the changes made before it stopped.
	Actions []string
}

// Error names why the run stopped and what it changed before.
func (e *PartialError) Error() string {
	return fmt.Sprintf("%v after: %s", e.Err, strings.Join(e.Actions, "; "))
}

// Unwrap returns Err.
func (e *PartialError) Unwrap() error { return e.Err }

// ActionsOf returns the changes a failed run made before it stopped (the
// Actions of a [*PartialError] in err's chain), or nil.
func ActionsOf(err error) []string {
	var pe *PartialError
	if errors.As(err, &pe) {
		return append([]string(nil), pe.Actions...)
	}
	return nil
}

// Skipped builds the Result for a check that had nothing to look at.
func Skipped(name, reason, message string) Result {
	return Result{Name: name, Status: StatusSkipped, Reason: reason, Message: message}
}

// Func adapts a function to the Checker interface.
type Func struct {
	// CheckName is returned by Name.
	CheckName string
	// Fn is called by Run.
	Fn func(ctx context.Context) (Result, error)
}

// Name implements Checker.
func (f Func) Name() string { return f.CheckName }

// Run implements Checker.
func (f Func) Run(ctx context.Context) (Result, error) { return f.Fn(ctx) }

// ErrStillRunning: an earlier run of a Bounded check has not returned yet.
var ErrStillRunning = errors.New("the previous run of this check has not returned yet")

// Bounded wraps a Checker so that Run returns as soon as its context ends
// (SIGTERM, a timeout), whatever the check is doing: a run still going is
// then abandoned, and until it returns every further Run fails at once with
// ErrStillRunning rather than starting another, so a stuck check costs one
// goroutine, not one per run.
//
// What an abandoned or failed run changed on the node is not lost: the
// changes it recorded ([Record]) until then come back in a [*PartialError].
type Bounded struct {
	c       Checker
	running atomic.Bool
}

// Bound wraps c (a *Bounded is returned as is).
func Bound(c Checker) *Bounded {
	if b, ok := c.(*Bounded); ok {
		return b
	}
	return &Bounded{c: c}
}

// Name implements Checker.
func (b *Bounded) Name() string { return b.c.Name() }

type outcome struct {
	res Result
	err error
}

// Run implements Checker.
func (b *Bounded) Run(ctx context.Context) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("not run: %w", context.Cause(ctx))
	}
	if !b.running.CompareAndSwap(false, true) {
		return Result{}, ErrStillRunning
	}
	acts := &actionLog{}
	rctx := context.WithValue(ctx, actionsKey{}, acts)
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		func() {
			// Cleared before the outcome is handed over: a Run that
			// starts the moment this one returns must find it over.
			defer b.running.Store(false)
			o.res, o.err = b.c.Run(rctx)
		}()
		done <- o
	}()
	select {
	case o := <-done:
		if o.err != nil {
			return o.res, withActions(o.err, acts.snapshot())
		}
		return o.res, nil
	case <-ctx.Done():
		return Result{}, withActions(fmt.Errorf("interrupted (%w)", context.Cause(ctx)), acts.snapshot())
	}
}

// withActions attaches the changes a run made to its error.
func withActions(err error, acts []string) error {
	if len(acts) == 0 || len(ActionsOf(err)) > 0 {
		return err
	}
	return &PartialError{Err: err, Actions: acts}
}

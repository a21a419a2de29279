// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"errors"
)

// The nf_tables features kube-proxy's nftables ruleset uses, in the order
// the probe tries them. Stable: they name the expression in findings.
const (
	// ExprTable is an nf_tables table with filter base chains (nf_tables itself).
	ExprTable = "table"
	// ExprNATChain is a nat base chain (nft_chain_nat).
	ExprNATChain = "nat-chain"
	// ExprCt matches conntrack state (nft_ct, and conntrack itself,
	// nf_conntrack, which it loads as a dependency).
	ExprCt = "ct"
	// ExprFib matches "fib daddr type local" (nft_fib, nft_fib_ipv4).
	ExprFib = "fib"
	// ExprNumgen picks an endpoint with "numgen random mod N" (nft_numgen).
	ExprNumgen = "numgen"
	// ExprVerdictMap dispatches through a named verdict map (vmap).
	ExprVerdictMap = "verdict-map"
	// ExprConcatSet looks up "ip daddr . meta l4proto . th dport" in a
	// concatenated set.
	ExprConcatSet = "concatenated-set"
	// ExprNAT is "dnat to" an endpoint (nft_nat).
	ExprNAT = "nat"
	// ExprMasquerade is "masquerade fully-random" (nft_masq).
	ExprMasquerade = "masquerade"
	// ExprReject is "reject" for Services with no endpoints (nft_reject).
	ExprReject = "reject"
)

// Expressions are every feature the probe proves, in probe order.
var Expressions = []string{ExprTable, ExprNATChain, ExprCt, ExprFib, ExprNumgen, ExprVerdictMap, ExprConcatSet, ExprNAT, ExprMasquerade, ExprReject}

// ExprModules are the kernel modules each feature needs when nf_tables is
// built as modules (Debian, RHEL, SUSE): the kernel loads them on first
// use.
var ExprModules = map[string][]string{
	ExprTable:      {"nf_tables"},
	ExprNATChain:   {"nft_chain_nat", "nf_nat"},
	ExprCt:         {"nft_ct", "nf_conntrack"},
	ExprFib:        {"nft_fib", "nft_fib_ipv4"},
	ExprNumgen:     {"nft_numgen"},
	ExprVerdictMap: {},
	ExprConcatSet:  {},
	ExprNAT:        {"nft_nat"},
	ExprMasquerade: {"nft_masq"},
	ExprReject:     {"nft_reject", "nft_reject_ipv4"},
}

// ProbeResult is the kernel's answer for one feature.
type ProbeResult struct {
	// Expression is one of the Expr* names.
	Expression string
	// Err is the kernel's refusal; nil when the kernel accepted the rule
	// and listed it back.
	Err error
}

// Prober builds kube-proxy's nf_tables expressions somewhere the host's
// rules are not (the real one: a private network namespace).
type Prober interface {
	// Probe tries every feature in Expressions; the error is an
	// infrastructure failure (no permission for a network namespace),
	// never a refused expression.
	Probe(ctx context.Context) ([]ProbeResult, error)
}

// ProberFunc adapts a function to Prober.
type ProberFunc func(ctx context.Context) ([]ProbeResult, error)

// Probe implements Prober.
func (f ProberFunc) Probe(ctx context.Context) ([]ProbeResult, error) { return f(ctx) }

// errPrereq is the error of a feature whose prerequisite the kernel refused.
var errPrereq = errors.New("not tried")

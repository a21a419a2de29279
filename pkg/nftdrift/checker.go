// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// Reasons of the nftables-dataplane check (stable: reasons of the
// KubeProxyDataplaneDegraded condition).
const (
	ReasonOK               = "NFTablesDataplaneMatchesCluster"
	ReasonNotNFTables      = "NFTablesNotInUse"
	ReasonTableMissing     = "NFTablesTableMissing"
	ReasonObjectsMissing   = "NFTablesObjectsMissing"
	ReasonServiceIPMissing = "NFTablesServiceIPMissing"
	ReasonRejected         = "NFTablesServiceRejected"
	ReasonBlackHole        = "NFTablesLoadBalancerBlackHole"
	ReasonStaleEndpoints   = "NFTablesStaleEndpoints"
	ReasonMissingEndpoints = "NFTablesMissingEndpoints"
	ReasonNoKubeconfig     = "NoKubeconfig"
	// iptables mode (where iptables is the nf_tables backend).
	ReasonIPTablesOK            = "IPTablesChainsPresent"
	ReasonIPTablesChainsMissing = "IPTablesChainsMissing"
	ReasonIPTablesLegacy        = "IPTablesLegacyBackend"
	ReasonUnreachable           = kubeproxy.ReasonUnreachable
)

// reasonOf is each kind's reason, worst first.
var reasonOf = []struct{ kind, reason string }{
	{KindTableMissing, ReasonTableMissing},
	{KindObjectMissing, ReasonObjectsMissing},
	{KindBlackHole, ReasonBlackHole},
	{KindServiceIPMissing, ReasonServiceIPMissing},
	{KindWrongChain, ReasonServiceIPMissing},
	{KindNodePortMissing, ReasonServiceIPMissing},
	{KindRejected, ReasonRejected},
	{KindStaleEndpoint, ReasonStaleEndpoints},
	{KindMissingEndpoint, ReasonMissingEndpoints},
}

// Config builds the checker.
type Config struct {
	// Read reads kube-proxy's tables (Reader.Read).
	Read func() ([]Table, error)
	// ReadIPTables reads iptables-nft's tables (Reader.ReadIPTables); nil:
	// iptables mode is not judged.
	ReadIPTables func() ([]IPTablesFamily, error)
	// LegacyIPTables reports whether iptables-legacy holds kube-proxy's
	// chains; nil is LegacyIPTablesInUse.
	LegacyIPTables func() bool
	// Mode returns the mode kube-proxy runs in (its /proxyMode).
	Mode func(ctx context.Context) (string, error)
	// Services lists every Service; nil: only the table's presence is judged.
	Services func(ctx context.Context) ([]*corev1.Service, error)
	// Endpoints reads the EndpointSlices' summary (ipvsdrift's reader); nil
	// judges no endpoint.
	Endpoints ipvsdrift.Endpoints
	// NodeName is this node's name.
	NodeName string
	// Announced returns the LoadBalancer IPs this node announces (MetalLB's
	// ServiceL2Status, from the agent's cached view); nil judges no black
	// hole.
	Announced func(ctx context.Context) (map[netip.Addr]bool, error)
	// Settle holds findings back until they persisted (the agent); nil
	// reports at once (diagnose).
	Settle *check.Settler
}

// Checker is the nftables-dataplane check.
type Checker struct {
	cfg Config
	// mu serialises runs (the loop does; a concurrent diagnose-style call
	// stays safe).
	mu sync.Mutex
	// view lays the reads of named Services over the shared full read of
	// EndpointSlices, to confirm findings (nil without Endpoints).
	view *ipvsdrift.EndpointView
	// mode is kube-proxy's mode, the last one it reported while it does
	// not answer.
	mode kubeproxy.LastMode
}

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the nftables-dataplane checker.
func NewChecker(cfg Config) (*Checker, error) {
	if cfg.Read == nil || cfg.Mode == nil {
		return nil, errors.New("nftables-dataplane checker: Read and Mode are required")
	}
	if cfg.Settle != nil {
		cfg.Settle = &check.Settler{Grace: cfg.Settle.Grace, Clock: cfg.Settle.Clock}
	}
	c := &Checker{cfg: cfg, mode: kubeproxy.LastMode{Read: cfg.Mode}}
	if cfg.Endpoints != nil {
		c.view = ipvsdrift.NewEndpointView(cfg.Endpoints)
	}
	return c, nil
}

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameNFTablesDataplane }

// maxNamed bounds the findings a message names.
const maxNamed = 3

// named renders the first maxNamed findings for a message, and says when
// there are more.
func named(found []Finding) []string {
	var parts []string
	for i, f := range found {
		if i == maxNamed {
			return append(parts, "and more (ipvs-guard diagnose lists them)")
		}
		parts = append(parts, f.String())
	}
	return parts
}

// Run implements check.Checker.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameNFTablesDataplane)
	mode, err := c.mode.Mode(klog.NewContext(ctx, logger))
	if errors.Is(err, kubeproxy.ErrUnreachable) {
		return check.Skipped(c.Name(), ReasonUnreachable, "kube-proxy's metrics port refuses connections: its mode is unknown, its nftables table is not judged"), nil
	}
	if err != nil {
		return check.Result{}, err
	}
	if mode == kubeproxy.ModeIPTables && c.cfg.ReadIPTables != nil {
		return c.runIPTables(ctx, logger)
	}
	if mode != kubeproxy.ModeNFTables {
		return check.Skipped(c.Name(), ReasonNotNFTables, fmt.Sprintf("kube-proxy runs in %s mode: it programs no nftables table", mode)), nil
	}
	tables, err := c.cfg.Read()
	if err != nil {
		return check.Result{}, fmt.Errorf("reading kube-proxy's nftables table: %w", err)
	}
	in := Input{Tables: tables, Node: c.cfg.NodeName}
	if c.cfg.Services != nil {
		if in.Services, err = c.cfg.Services(ctx); err != nil {
			logger.Info("Cannot read Services; only the table's presence is judged", "err", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil && in.Services != nil {
		if in.Endpoints, err = c.view.Current(ctx); err != nil {
			logger.Info("Cannot read EndpointSlices; endpoints are not judged", "err", err)
		}
	}
	if c.cfg.Announced != nil && in.Services != nil {
		if in.Announced, err = c.cfg.Announced(ctx); err != nil {
			logger.Info("Cannot read the LoadBalancer IPs this node announces; black holes are not judged", "err", err)
		}
	}
	found := check.KeepSettled(c.cfg.Settle, Compare(in), Finding.Key)
	if c.cfg.Settle != nil && in.Endpoints != nil {
		// The agent's full read of EndpointSlices is up to
		// FullComparisonPeriod old: every settled finding of a Service is
		// confirmed against a read of it now, as ipvs-dataplane does.
		now := time.Now()
		if c.cfg.Settle.Clock != nil {
			now = c.cfg.Settle.Clock.Now()
		}
		found = ipvsdrift.Confirm(ctx, c.view, logger, in.Endpoints, found, now, Finding.Key, func(f Finding) string { return f.Service },
			func(eps ipvsdrift.ServiceEndpoints) []Finding { in.Endpoints = eps; return Compare(in) })
	}
	res := check.Result{Name: c.Name()}
	var problems []Finding
	for _, f := range found {
		res.Findings = append(res.Findings, f)
		if f.Problem {
			problems = append(problems, f)
		}
	}
	if len(problems) == 0 {
		res.Status, res.Reason = check.StatusOK, ReasonOK
		res.Message = "kube-proxy's nftables table matches the Services and endpoints (ghost elements and chains, if any: ipvs-guard diagnose)"
		return res, nil
	}
	found = problems
	res.Status = check.StatusProblem
	for _, r := range reasonOf {
		for _, f := range found {
			if f.Kind == r.kind && res.Reason == "" {
				res.Reason = r.reason
			}
		}
	}
	parts := named(found)
	holes := 0
	for _, f := range found {
		if f.Kind == KindBlackHole {
			holes++
		}
	}
	blackHoleStep := "a black hole: MetalLB announces the LoadBalancer IP from this node, which has no local endpoint of its Local-policy Service; check the MetalLB speaker on this node (its log; restart it to have the IP move to a node with an endpoint) and the Service's pods"
	if holes == len(found) {
		res.Message = strings.Join(parts, "; ") + ": external clients of it get no answer until MetalLB moves the IP or a local endpoint is ready"
		res.Remediation = check.Steps(blackHoleStep)
		return res, nil
	}
	res.Message = strings.Join(parts, "; ") + ": kube-proxy repairs its table only at its next full sync (hourly) or a Service change; restart kube-proxy on this node to rewrite it now"
	steps := []string{"restart kube-proxy on this node (RKE2: `crictl rm -f $(crictl ps -q --name kube-proxy)`; kubeadm: delete its kube-proxy pod): it rewrites its whole table at start",
		"if a firewall reload removed the table (firewalld FlushAllOnReload, `nft flush ruleset`), keep that from touching the kube-proxy table"}
	if holes > 0 {
		steps = append(steps, blackHoleStep)
	}
	res.Remediation = check.Steps(steps...)
	return res, nil
}

// runIPTables judges iptables mode: kube-proxy's chains present in
// iptables-nft's tables (docs/design.md §3c).
func (c *Checker) runIPTables(ctx context.Context, logger klog.Logger) (check.Result, error) {
	legacy := c.cfg.LegacyIPTables
	if legacy == nil {
		legacy = LegacyIPTablesInUse
	}
	if legacy() {
		return check.Skipped(c.Name(), ReasonIPTablesLegacy, "kube-proxy runs in iptables mode and this node's iptables is the legacy (x_tables) backend: its chains are not read"), nil
	}
	fams, err := c.cfg.ReadIPTables()
	if err != nil {
		return check.Result{}, fmt.Errorf("reading iptables-nft's tables: %w", err)
	}
	var svcs []*corev1.Service
	if c.cfg.Services != nil {
		if svcs, err = c.cfg.Services(ctx); err != nil {
			logger.Info("Cannot read Services; only the IPv4 chains are judged", "err", err)
		}
	}
	found := check.KeepSettled(c.cfg.Settle, CompareIPTables(fams, svcs), Finding.Key)
	res := check.Result{Name: c.Name()}
	for _, f := range found {
		res.Findings = append(res.Findings, f)
	}
	if len(found) == 0 {
		res.Status, res.Reason = check.StatusOK, ReasonIPTablesOK
		res.Message = "kube-proxy runs in iptables mode and its chains (KUBE-SERVICES, KUBE-PROXY-CANARY) are present"
		return res, nil
	}
	res.Status, res.Reason = check.StatusProblem, ReasonIPTablesChainsMissing
	parts := named(found)
	res.Message = strings.Join(parts, "; ") + ": kube-proxy's canary should make it rewrite its rules within its sync period; it has not"
	res.Remediation = check.Steps("restart kube-proxy on this node (RKE2: `crictl rm -f $(crictl ps -q --name kube-proxy)`; kubeadm: delete its kube-proxy pod): it rewrites its rules at start",
		"if a firewall reload flushes the ruleset (firewalld FlushAllOnReload, `nft flush ruleset`, `iptables -F`), keep it from touching kube-proxy's chains")
	return res, nil
}

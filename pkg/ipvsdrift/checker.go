// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// Reasons of the ipvs-dataplane check (stable: they become reasons of
// KubeProxyDataplaneDegraded).
const (
	ReasonOK                 = "IPVSDataplaneMatchesCluster"
	ReasonStaleRealServers   = "StaleRealServers"
	ReasonMissingRealServers = "MissingRealServers"
	ReasonStuckWeightZero    = "RealServersStuckAtWeightZero"
	ReasonNoKubeconfig       = "NoKubeconfig"
	ReasonModuleNotLoaded    = "IPVSModuleNotLoaded"
	ReasonServicesUnreadable = "ServicesUnreadable"
)

var reasonOf = map[string]string{
	KindStaleRealServer:   ReasonStaleRealServers,
	KindMissingRealServer: ReasonMissingRealServers,
	KindStuckWeightZero:   ReasonStuckWeightZero,
}

// Endpoints is where the check reads endpoints (*EndpointReader).
type Endpoints interface {
	// All returns the endpoints of every proxied Service and when they
	// were read (a read at most FullComparisonPeriod old in the agent).
	All(ctx context.Context) (ServiceEndpoints, time.Time, error)
	// Of reads the named Services' endpoints now.
	Of(ctx context.Context, services []string) (ServiceEndpoints, error)
}

// Config builds the checker.
type Config struct {
	// IPVS reads the table.
	IPVS ipvs.Interface
	// ReadLink reads kube-ipvs0.
	ReadLink kubeproxy.LinkReader
	// Services lists every Service (the agent's cache); nil without a
	// kubeconfig: the check is skipped.
	Services func(ctx context.Context) ([]*corev1.Service, error)
	// Endpoints reads EndpointSlices; nil judges no real server.
	Endpoints Endpoints
	// Root is the host's filesystem ConnPath is read in.
	Root hostfs.Root
	// ConnPath is the IPVS connection table, a host path under Root
	// (ipvs.ProcConnPath on the host); "" judges no connection.
	ConnPath string
	// NodeName is this node's name.
	NodeName string
	// NodePorts is the API server's NodePort range (zero: the default).
	NodePorts NodePortRange
	// Settle gives the settle grace (the checker keeps its own Settler with
	// its Grace and Clock); with it, every
	// real-server finding is also confirmed against a fresh read of its
	// Service's EndpointSlices. Nil reports at once (diagnose, whose read
	// is fresh).
	Settle *check.Settler
	// Clock times weight-0 real servers; nil is the real clock.
	Clock clock.PassiveClock
	// IPVSUse says whether the IPVS prerequisites apply (nil: they do).
	IPVSUse check.IPVSUseFunc
}

// Checker is the ipvs-dataplane check.
type Checker struct {
	cfg Config

	// mu guards the fields below (runs are serialised by the loop; the lock
	// keeps a concurrent diagnose-style call safe).
	mu sync.Mutex
	// zeroSince is when each real server was first seen at weight 0.
	zeroSince map[zeroKey]time.Time
	// view lays the reads of named Services over the full read (nil
	// without Endpoints).
	view *EndpointView
}

type zeroKey struct {
	vs ipvs.Key
	rs netip.AddrPort
}

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the ipvs-dataplane checker.
func NewChecker(cfg Config) (*Checker, error) {
	if cfg.IPVS == nil || cfg.ReadLink == nil {
		return nil, errors.New("ipvs-dataplane checker: IPVS and ReadLink are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Settle != nil {
		// A Settler forgets the keys a call does not pass: shared with the
		// ipvs check (checkset passes one to both), each would forget the
		// other's findings on every run and nothing would ever settle.
		cfg.Settle = &check.Settler{Grace: cfg.Settle.Grace, Clock: cfg.Settle.Clock}
	}
	c := &Checker{cfg: cfg, zeroSince: map[zeroKey]time.Time{}}
	if cfg.Endpoints != nil {
		c.view = NewEndpointView(cfg.Endpoints)
	}
	return c, nil
}

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameIPVSDataplane }

// maxNamed bounds how many findings a problem message names.
const maxNamed = 3

// Run implements check.Checker.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameIPVSDataplane)
	if c.cfg.IPVSUse != nil {
		if use := c.cfg.IPVSUse(ctx); !use.Applies {
			return use.NotInUse(c.Name()), nil
		}
	}
	if c.cfg.Services == nil {
		return check.Skipped(c.Name(), ReasonNoKubeconfig, "comparing the IPVS table with Services and endpoints needs --kubeconfig"), nil
	}
	table, err := c.cfg.IPVS.Table(ctx)
	if errors.Is(err, ipvs.ErrModuleNotLoaded) {
		return check.Skipped(c.Name(), ReasonModuleNotLoaded, "ip_vs is not loaded: no IPVS table to compare (the ipvs and modules checks report it)"), nil
	}
	if err != nil {
		return check.Result{}, fmt.Errorf("reading the IPVS table: %w", err)
	}
	link, err := c.cfg.ReadLink(kubeproxy.DummyInterface)
	if err != nil {
		return check.Result{}, fmt.Errorf("reading %s: %w", kubeproxy.DummyInterface, err)
	}
	svcs, err := c.cfg.Services(ctx)
	if err != nil {
		return check.Skipped(c.Name(), ReasonServicesUnreadable, fmt.Sprintf("Services could not be read (%v): the IPVS table is not compared", err)), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Clock.Now()
	in := Input{Table: table, LinkAddrs: link.Addrs, Services: svcs, Node: c.cfg.NodeName, NodePorts: c.cfg.NodePorts, ZeroFor: c.trackZero(table, now)}
	if c.cfg.Settle == nil {
		in.ZeroFor = nil
	}
	if c.view != nil {
		if in.Endpoints, err = c.view.Current(ctx); err != nil {
			logger.Info("Cannot read EndpointSlices; real servers of the Services not read are not judged", "err", err)
		}
	}
	if c.cfg.ConnPath != "" && in.Endpoints != nil {
		if in.Conns, err = ipvs.ReadConnCounts(c.cfg.Root, c.cfg.ConnPath, GoneBackendFilter(in)); err != nil {
			logger.Info("Cannot read the IPVS connection table; connections are not judged", "err", err)
		}
	}
	found, unread := compare(in)
	if len(unread) > 0 && c.cfg.Settle != nil {
		// Services created since the full read: read them now, once each
		// (the answer stands until the next full read).
		if eps, err := c.view.Read(ctx, in.Endpoints, unread); err != nil {
			logger.Info("Cannot read the EndpointSlices of Services created since the full read; not judging them yet", "services", len(unread), "err", err)
		} else {
			in.Endpoints = eps
			found = Compare(in)
		}
	}
	found = c.settled(found)
	if c.cfg.Settle != nil && in.Endpoints != nil {
		found = Confirm(ctx, c.view, logger, in.Endpoints, found, now, Finding.Key, func(f Finding) string { return f.Service },
			func(eps ServiceEndpoints) []Finding { in.Endpoints = eps; return Compare(in) })
	}
	return c.result(found), nil
}

// trackZero updates when each real server was first seen at weight 0 and
// returns the age lookup; real servers no longer at weight 0 are forgotten.
func (c *Checker) trackZero(table ipvs.Table, now time.Time) func(ipvs.Key, netip.AddrPort) time.Duration {
	next := map[zeroKey]time.Time{}
	for _, e := range table {
		for _, r := range e.Real {
			if r.Weight != 0 {
				continue
			}
			k := zeroKey{e.Virtual.Key(), netip.AddrPortFrom(r.Address.Unmap(), r.Port)}
			t, ok := c.zeroSince[k]
			if !ok {
				t = now
			}
			next[k] = t
		}
	}
	c.zeroSince = next
	return func(vs ipvs.Key, rs netip.AddrPort) time.Duration {
		if t, ok := next[zeroKey{vs, rs}]; ok {
			return now.Sub(t)
		}
		return 0
	}
}

// settled keeps the findings that persisted for the settle grace.
func (c *Checker) settled(found []Finding) []Finding {
	return check.KeepSettled(c.cfg.Settle, found, Finding.Key)
}

// result words the check's result: a problem for the kinds that break
// traffic now, naming at most maxNamed of them; advisories are findings
// and metrics only, and an ok message is the same whatever their number.
func (c *Checker) result(found []Finding) check.Result {
	sum := Summary{Counts: map[string]int{}}
	for _, k := range Kinds {
		sum.Counts[k] = 0
	}
	var problems []Finding
	for _, f := range found {
		sum.Counts[f.Kind]++
		if f.Kind == KindGoneBackendConnections {
			sum.GoneConnections = append(sum.GoneConnections, f)
		}
		if f.Problem {
			problems = append(problems, f)
		}
	}
	res := check.Result{Name: c.Name(), Findings: []check.Finding{sum}}
	for _, f := range found {
		res.Findings = append(res.Findings, f)
	}
	if len(problems) == 0 {
		res.Status, res.Reason = check.StatusOK, ReasonOK
		res.Message = "every real server kube-proxy programmed is a ready endpoint of its Service and every ready endpoint has one (ghost virtual servers, weight-0 leftovers and connections to gone backends, if any: ipvs-guard diagnose)"
		return res
	}
	res.Status, res.Reason = check.StatusProblem, reasonOf[problems[0].Kind]
	var named []string
	for _, f := range problems[:min(len(problems), maxNamed)] {
		named = append(named, f.String())
	}
	more := ""
	if len(problems) > maxNamed {
		more = " and more (ipvs-guard diagnose lists every one)"
	}
	res.Message = "kube-proxy's IPVS table disagrees with the cluster's endpoints: " + strings.Join(named, "; ") + more
	res.Remediation = check.Steps(
		"kube-proxy on this node is not applying endpoint changes: read its log (kubectl -n kube-system logs <kube-proxy pod on this node>, or journalctl on RKE2/RKE1) and its sync metrics (kubeproxy_sync_proxy_rules_last_timestamp_seconds)",
		"restart kube-proxy on this node: it rebuilds every virtual server's real servers from the EndpointSlices",
		"a real server added or removed by hand (ipvsadm) is put back by kube-proxy only at its next full sync: do not edit kube-proxy's virtual servers by hand")
	return res
}

// Summary counts the findings by kind; it publishes them as metrics.
type Summary struct {
	// Counts are the findings by kind (every kind present).
	Counts map[string]int `json:"counts"`
	// GoneConnections are the connections-to-gone-backend findings.
	GoneConnections []Finding `json:"-"`
}

// String renders the counts as one line.
func (s Summary) String() string {
	var parts []string
	for _, k := range Kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Counts[k]))
	}
	return strings.Join(parts, ", ")
}

// State implements check.Finding: ipvs_guard_ipvs_drift_findings by kind
// and ipvs_guard_ipvs_gone_backend_connections by Service and protocol.
func (s Summary) State() check.State {
	st := &check.IPVSDriftState{Findings: maps.Clone(s.Counts), GoneBackendConnections: map[check.ServiceProtocol]int{}}
	for _, f := range s.GoneConnections {
		proto := f.VirtualServer[strings.LastIndexByte(f.VirtualServer, '/')+1:]
		st.GoneBackendConnections[check.ServiceProtocol{Service: f.Service, Protocol: proto}] += f.Connections
	}
	return check.State{IPVSDrift: st}
}

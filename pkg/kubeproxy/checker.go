// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
)

// Reasons of the kube-proxy check (stable: they become Node condition reasons).
const (
	ReasonIPVSMode         = "KubeProxyIPVSMode"
	ReasonProxyModeNotIPVS = "ProxyModeNotIPVS"
	// ReasonNotConfiguredIPVS: kube-proxy is configured for and runs in a
	// mode other than IPVS; the shared check.ReasonIPVSNotInUse, so every
	// IPVS condition says the same.
	ReasonNotConfiguredIPVS  = check.ReasonIPVSNotInUse
	ReasonKubeIPVS0Missing   = "KubeIPVS0Missing"
	ReasonUnreachable        = "KubeProxyUnreachable"
	ReasonIPVSDeprecatedNote = "IPVSDeprecated"
)

// VersionSource returns kube-proxy's version from somewhere other than its
// metrics port (e.g. the Node's status.nodeInfo), or an error.
type VersionSource func(ctx context.Context) (Version, error)

// CheckerConfig builds the kube-proxy checker.
type CheckerConfig struct {
	// Client reads kube-proxy's metrics port.
	Client *Client
	// ReadLink reads kube-ipvs0 (ReadLink).
	ReadLink LinkReader
	// FallbackVersion is used when /metrics has no build info (optional).
	FallbackVersion VersionSource
	// Scheduler is the scheduler remediation asks for ("" leaves it out).
	Scheduler string
	// Distro words the remediation.
	Distro distro.Distro
}

// Checker is the kube-proxy check: the IPVS prerequisites kube-proxy itself
// must meet (IPVS mode as configured, kube-ipvs0). kube-proxy's health in
// every mode is the kube-proxy-sync check's (SyncChecker).
type Checker struct {
	cfg CheckerConfig
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the kube-proxy checker.
func NewChecker(cfg CheckerConfig) (*Checker, error) {
	if cfg.Client == nil || cfg.ReadLink == nil {
		return nil, errors.New("kube-proxy checker: Client and ReadLink are required")
	}
	return &Checker{cfg: cfg}, nil
}

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameKubeProxy }

// Finding is what the kube-proxy check saw.
type Finding struct {
	// Mode is the mode kube-proxy runs in (/proxyMode).
	Mode string `json:"mode"`
	// ConfiguredMode is the mode in /configz ("" when unknown).
	ConfiguredMode string `json:"configuredMode,omitempty"`
	// Scheduler is the configured IPVS scheduler ("" when unknown).
	Scheduler string `json:"scheduler,omitempty"`
	// StrictARP is the configured strict ARP (nil when unknown).
	StrictARP *bool `json:"strictARP,omitempty"`
	// Version is kube-proxy's version ("" when unknown).
	Version string `json:"version,omitempty"`
	// VersionSource says where Version came from.
	VersionSource string `json:"versionSource,omitempty"`
	// KubeIPVS0 is whether the kube-ipvs0 interface exists.
	KubeIPVS0 bool `json:"kubeIPVS0"`
	// KubeIPVS0Addresses are kube-ipvs0's addresses.
	KubeIPVS0Addresses []string `json:"kubeIPVS0Addresses"`
	// Notice is the IPVS deprecation notice, when it applies.
	Notice string `json:"notice,omitempty"`
}

// String renders the finding as one line.
func (f Finding) String() string {
	s := f.settings()
	if f.KubeIPVS0 {
		return s + fmt.Sprintf(", kube-ipvs0 with %d address(es)", len(f.KubeIPVS0Addresses))
	}
	return s + ", no kube-ipvs0"
}

// settings renders mode, version, scheduler and strict ARP: what the
// condition message says. kube-ipvs0's address count is left to String (the
// diagnose report): kube-proxy binds every Service IP there, so it changes
// with every Service on every node.
func (f Finding) settings() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kube-proxy mode %s", f.Mode)
	if f.ConfiguredMode != "" {
		fmt.Fprintf(&b, " (configured %s)", f.ConfiguredMode)
	}
	if f.Version != "" {
		fmt.Fprintf(&b, ", version %s", f.Version)
	}
	if f.Scheduler != "" {
		fmt.Fprintf(&b, ", scheduler %s", f.Scheduler)
	}
	if f.StrictARP != nil {
		fmt.Fprintf(&b, ", strictARP %t", *f.StrictARP)
	}
	return b.String()
}

// State implements check.Finding: kube-proxy's mode and strict ARP.
func (f Finding) State() check.State {
	return check.State{KubeProxy: &check.KubeProxyState{Mode: f.Mode, StrictARP: f.StrictARP}}
}

// Run implements check.Checker.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameKubeProxy)
	mode, err := c.cfg.Client.ProxyMode(ctx)
	if errors.Is(err, ErrUnreachable) {
		return check.Skipped(c.Name(), ReasonUnreachable, fmt.Sprintf(
			"kube-proxy's metrics port %s refuses connections (kube-proxy is not running on this node, is restarting, or serves elsewhere: set --kube-proxy-metrics-address)", c.cfg.Client.Address())), nil
	}
	if err != nil {
		return check.Result{}, fmt.Errorf("reading kube-proxy's mode: %w", err)
	}
	f := Finding{Mode: mode, KubeIPVS0Addresses: []string{}}
	cfg, cfgErr := c.cfg.Client.Configz(ctx)
	if cfgErr == nil {
		f.ConfiguredMode = cfg.EffectiveMode()
		f.Scheduler = cfg.EffectiveScheduler()
		strict := cfg.IPVS.StrictARP
		f.StrictARP = &strict
	} else {
		logger.V(2).Info("kube-proxy /configz unavailable", "err", cfgErr)
	}
	metrics, metricsErr := c.cfg.Client.Metrics(ctx)
	if v, err := c.version(ctx, &f, metrics, metricsErr); err == nil {
		f.Version = v.String()
		if mode == ModeIPVS {
			f.Notice = DeprecationNotice(v)
		}
	}
	link, err := c.cfg.ReadLink(DummyInterface)
	if err != nil {
		return check.Result{}, err
	}
	f.KubeIPVS0 = link.Exists
	for _, a := range link.Addrs {
		f.KubeIPVS0Addresses = append(f.KubeIPVS0Addresses, a.String())
	}

	res := check.Result{Name: c.Name(), Findings: []check.Finding{f}}
	sched := c.cfg.Scheduler
	if sched == "" {
		sched = f.Scheduler
	}
	settings := distro.KubeProxySettings{Scheduler: sched, StrictARP: true}
	switch {
	case mode != ModeIPVS && f.ConfiguredMode != "" && f.ConfiguredMode != ModeIPVS:
		res.Status, res.Reason = check.StatusSkipped, ReasonNotConfiguredIPVS
		// Nothing to fix: a node off IPVS is not told to go back.
		res.Message = DecideIPVSUse(c.cfg.Client.Address(), mode, nil, f.ConfiguredMode, nil).Message
	case mode != ModeIPVS:
		res.Status, res.Reason = check.StatusProblem, ReasonProxyModeNotIPVS
		if f.ConfiguredMode == ModeIPVS {
			res.Message = fmt.Sprintf("kube-proxy is configured for ipvs but runs in %s mode: it could not use IPVS (usually missing ip_vs modules, see the modules check) and fell back", mode)
			res.Remediation = append(check.Steps("load and persist the IPVS modules (modules check, or ipvs-guard diagnose --fix), then restart kube-proxy on this node"), c.cfg.Distro.KubeProxyRemediation(settings)...)
		} else {
			res.Message = fmt.Sprintf("kube-proxy runs in %s mode, not ipvs (its /configz is unavailable: %v)", mode, cfgErr)
			res.Remediation = c.cfg.Distro.KubeProxyRemediation(settings)
		}
	case !link.Exists:
		res.Status, res.Reason = check.StatusProblem, ReasonKubeIPVS0Missing
		res.Message = "kube-proxy runs in IPVS mode but the kube-ipvs0 dummy interface does not exist: kube-proxy cannot bind Service and LoadBalancer IPs (restart kube-proxy on this node and read its log)"
		res.Remediation = []check.Step{c.cfg.Distro.KubeProxyRestart("read its log for errors creating kube-ipvs0 (the dummy module must be available)")}
	default:
		res.Status, res.Reason = check.StatusOK, ReasonIPVSMode
		res.Message = f.settings() + ", kube-ipvs0 present"
		if f.Notice != "" {
			res.Message += ". " + f.Notice
		}
	}
	return res, nil
}

func (c *Checker) version(ctx context.Context, f *Finding, metrics []byte, err error) (Version, error) {
	var v Version
	if err == nil {
		v, err = ParseBuildInfo(bytes.NewReader(metrics))
	}
	if err == nil {
		f.VersionSource = "kube-proxy /metrics"
		return v, nil
	}
	if c.cfg.FallbackVersion != nil {
		if v, ferr := c.cfg.FallbackVersion(ctx); ferr == nil {
			f.VersionSource = "Node status"
			return v, nil
		}
	}
	return Version{}, err
}

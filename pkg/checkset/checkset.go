// SPDX-License-Identifier: Apache-2.0

package checkset

import (
	"context"
	"net/netip"

	"fmt"
	corev1 "k8s.io/api/core/v1"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpsysctl"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvssysctl"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
	"github.com/ipvs-guard/ipvs-guard/pkg/nftdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/nftready"
)

// DefaultListTimeout bounds the one-shot listing of the cluster (Services,
// Nodes, MetalLB's ServiceL2Status) when no agent view is given.
const DefaultListTimeout = 10 * time.Second

// Config is everything the check set is built from (docs/design.md §8: the flags
// shared by `diagnose` and `run`).
type Config struct {
	// Root is the host's filesystem (--root).
	Root hostfs.Root
	// NodeName is this node's name (--node-name).
	NodeName string
	// Scheduler is the IPVS scheduler (--scheduler); empty resolves it from
	// kube-proxy's /configz, else its ConfigMap, else rr, on every run.
	Scheduler string
	// KubeProxyMetricsAddress is where kube-proxy serves /proxyMode and
	// /configz (--kube-proxy-metrics-address); empty is
	// kubeproxy.DefaultMetricsAddress.
	KubeProxyMetricsAddress string
	// AssumeProxyMode is the mode kube-proxy is configured for when
	// neither kube-proxy, the node's configuration nor the kernel's state
	// tells it (--assume-proxy-mode): the operator's word, last in
	// precedence. Empty: the mode is then unknown, and nothing is loaded
	// or declared.
	AssumeProxyMode string
	// ProbeIPs are the IPs the arp check probes (--probe-ip); when set, it
	// probes exactly these, never the cluster's LoadBalancer IPs.
	ProbeIPs []string
	// ProbeInterface is the interface to probe on (--interface); empty
	// picks one by route lookup.
	ProbeInterface string
	// Remediate lets the modules check load modules and write the
	// modules-load.d file (diagnose --fix, run --remediate). Off, no check
	// changes anything on the node.
	Remediate bool
	// Loader loads modules when Remediate is set; nil is the native loader.
	Loader modules.Loader
	// Cluster is how the cluster-aware checks read the cluster; nil means
	// node-local checks only.
	Cluster *Cluster
	// Settle holds back an ipvs finding until it persisted (the agent: so
	// kube-proxy's lag behind a Service change is no problem on every
	// node); nil reports every finding at once (diagnose).
	Settle *check.Settler
	// TargetMode adds the readiness report for a move to that proxy mode
	// (diagnose --target-mode); "nftables" is the only one. Empty adds it
	// only when ReadinessInterval is set.
	TargetMode string
	// ProveKernel lets the readiness report's probe make the kernel load
	// the nf_tables modules it needs, and nothing else (diagnose
	// --prove-kernel): no IPVS module is loaded, nothing is declared.
	ProveKernel bool
	// ReadinessInterval adds the nftables-readiness check, run for real at
	// most this often (the agent: an advisory published as metrics); 0
	// adds it only when TargetMode asks.
	ReadinessInterval time.Duration
	// RemoveOwnLeftovers lets the ipvs-leftovers check remove the
	// modules-load.d file ipvs-guard wrote, once kube-proxy runs another
	// mode (chart value nftablesMigration.removeOwnLeftovers).
	RemoveOwnLeftovers bool
}

// TargetModeNFTables is the one --target-mode there is.
const TargetModeNFTables = kubeproxy.ModeNFTables

// ValidateTargetMode refuses a --target-mode no readiness report exists for.
func ValidateTargetMode(m string) error {
	if m != "" && m != TargetModeNFTables {
		return fmt.Errorf("unknown target mode %q: the one supported is %s", m, TargetModeNFTables)
	}
	return nil
}

// Cluster is the cluster access of the cluster-aware checks.
type Cluster struct {
	// Client reads Services, EndpointSlices, the kube-proxy ConfigMap and
	// this Node's kube-proxy version.
	Client kube.Interface
	// View is the agent's informer-fed view of the cluster: the ipvs and
	// arp-sysctls checks read Services and EndpointSlices from it and the
	// arp check probes its LoadBalancer IPs. Nil (diagnose), they list
	// through Client, and the arp check probes the LoadBalancer IPs of a
	// view Build lists once through Client and Dynamic.
	View *clusterview.View
	// Dynamic reads MetalLB's ServiceL2Status for the one-shot view; nil
	// with no View leaves the arp check to ProbeIPs.
	Dynamic dynamic.Interface
	// Metadata reads Nodes' metadata (their MAC annotations) when a probe
	// needs them, for the one-shot view.
	Metadata metadata.Interface
	// ShardK is how many nodes probe each LoadBalancer IP; 0 probes every
	// IP from this node.
	ShardK int
	// ListTimeout bounds the one-shot listing; 0 is DefaultListTimeout.
	ListTimeout time.Duration
	// MetalLBNamespace is where MetalLB's pools, advertisements and
	// speaker Pods are, for the one-shot view (--metallb-namespace);
	// empty is clusterview.DefaultMetalLBNamespace.
	MetalLBNamespace string
	// LastError, when set, returns the last failure to reach the API
	// server (kube.Guard.LastError): a one-shot listing that times out
	// names it (the refused connection, the unknown host), not only the
	// deadline.
	LastError func() error
}

// Build returns the checks in report order: modules, kube-proxy,
// kube-proxy-sync, ipvs, arp-sysctls, arp, ipvs-dataplane,
// nftables-dataplane, nftables-prerequisites, then the advisory checks ipvs-sysctls,
// conntrack, ipvs-leftovers, and nftables-readiness when TargetMode or
// ReadinessInterval asks for it. The only I/O it does is the one-shot listing of the
// cluster for the arp check (Cluster with Dynamic and no View, no
// ProbeIPs); when that fails, the arp check reports the error on every run
// and the other checks are built as usual.
func Build(ctx context.Context, cfg Config) ([]check.Checker, error) {
	s := newShared(cfg)
	// One netlink socket for every check reading the IPVS table. The
	// ipvs-dataplane check uses the table the ipvs check just read (the
	// dump is most of a resync's CPU at 10,000 virtual servers); in a
	// one-shot run with the readiness report, the leftovers and readiness
	// reports judge the table read first in the run too.
	recent := ipvs.NewRecent(ipvs.New(cfg.Root))
	var table ipvs.Interface = recent
	if cfg.TargetMode != "" && cfg.ReadinessInterval == 0 {
		table = recent.Within(wholeRun)
	}
	var b builder
	b.add(modules.NewChecker(modules.Config{Root: cfg.Root, SchedulerFunc: s.scheduler, Remediate: cfg.Remediate, Loader: cfg.Loader, Distro: s.distro, IPVSUse: s.use.Use}), nil)
	b.add(kubeproxy.NewChecker(kubeproxy.CheckerConfig{Client: s.kubeProxy, ReadLink: kubeproxy.ReadLink, FallbackVersion: s.kubeProxyVersion, Scheduler: cfg.Scheduler, Distro: s.distro}))
	// kube-proxy's health in every mode (docs/design.md §3b).
	b.add(kubeproxy.NewSyncChecker(kubeproxy.SyncCheckerConfig{Client: s.kubeProxy, Distro: s.distro}))
	b.add(ipvscheck.NewChecker(ipvscheck.Config{IPVS: recent, ReadLink: kubeproxy.ReadLink, KubeProxy: s.kubeProxy, Cluster: s.services, NodeName: cfg.NodeName, Scheduler: s.schedulers.Resolve, Distro: s.distro, Settle: cfg.Settle, IPVSUse: s.use.Use}))
	b.add(arpsysctl.NewChecker(arpsysctl.Config{Root: cfg.Root, Interfaces: s.interfaces, ReadLink: kubeproxy.ReadLink, LoadBalancerIPs: s.lbIPs, KubeProxy: s.kubeProxy, Distro: s.distro, IPVSUse: s.use.Use}))
	b.add(arpChecker(ctx, cfg))
	b.add(dataplaneChecker(cfg, s, recent.Within(dataplaneTableAge)))
	// kube-proxy's nftables table against the cluster (docs/design.md §3c),
	// from the same EndpointSlice reader: the full read is shared. The
	// reader keeps what it read between runs (a re-read dumps only what
	// kube-proxy changed).
	nftReader := &nftdrift.Reader{}
	b.add(nftdrift.NewChecker(nftdrift.Config{Read: nftReader.Read, ReadIPTables: nftReader.ReadIPTables, Mode: s.kubeProxy.ProxyMode, Services: s.servicesFunc(),
		Endpoints: s.endpoints, NodeName: cfg.NodeName, Settle: cfg.Settle, Announced: announcedBy(cfg)}))
	// What kube-proxy's nftables mode needs of the kernel, kept true
	// after the switch (docs/design.md §3c): files under --root only.
	b.add(nftready.NewPrerequisitesChecker(nftready.PrerequisitesConfig{Host: nftready.HostSources(cfg.Root), Mode: s.kubeProxy.ProxyMode}))
	// The advisory checks (docs/design.md §3b): no Node condition.
	b.add(ipvssysctl.NewChecker(ipvssysctl.Config{Root: cfg.Root, Timeouts: ipvs.New(cfg.Root), IPVSUse: s.use.Use}), nil)
	b.add(ipvssysctl.NewConntrackChecker(cfg.Root), nil)
	b.add(nftready.NewLeftoversChecker(nftready.LeftoversConfig{Root: cfg.Root, IPVSUse: s.use.Use, ReadLink: kubeproxy.ReadLink,
		IPVS: table, IPSets: nftready.HostIPSets, RemoveOwn: cfg.RemoveOwnLeftovers}), nil)
	if cfg.TargetMode == TargetModeNFTables || cfg.ReadinessInterval > 0 {
		// The probe proves the running kernel: a captured tree (--root)
		// is judged from its files alone.
		var prober nftready.Prober
		if cfg.Root.IsHost() {
			prober = nftready.NetNSProber{}
		}
		// The kube-proxy ConfigMap's per-mode sections (kubeadm; RKE1 and
		// RKE2 configure kube-proxy with flags and have no ConfigMap): one
		// GET per readiness run.
		var configFile func(context.Context) (kubeproxy.Config, error)
		if c := cfg.Cluster; c != nil && c.Client != nil && s.distro != distro.RKE2 && s.distro != distro.RKE1 {
			configFile = func(ctx context.Context) (kubeproxy.Config, error) {
				fc, err := kubeproxy.ConfigMapConfig(ctx, c.Client)
				if apierrors.IsNotFound(err) {
					return kubeproxy.Config{}, nil // no ConfigMap: kube-proxy is configured otherwise
				}
				return fc, err
			}
		}
		var c check.Checker = nftready.NewReadinessChecker(nftready.ReadinessConfig{
			Host:            nftready.HostSources(cfg.Root),
			Prober:          prober,
			MayLoadModules:  cfg.Remediate || cfg.ProveKernel,
			KubeProxy:       s.kubeProxy,
			FallbackVersion: s.kubeProxyVersion,
			IPVS:            table,
			Cluster:         s.services,
			NodeName:        cfg.NodeName,
			Distro:          s.distro,
			ConfigFile:      configFile,
		})
		if cfg.ReadinessInterval > 0 {
			c = check.NewEvery(c, cfg.ReadinessInterval, nil)
		}
		b.add(c, nil)
	}
	return b.checkers, b.err
}

// dataplaneTableAge is how old a table the ipvs check read may be for the
// ipvs-dataplane check to use it instead of reading its own: both run on
// every resync, within moments of each other, and the dataplane check's
// findings settle for 30 s anyway.
const dataplaneTableAge = 5 * time.Second

// dataplaneChecker builds the ipvs-dataplane check: the IPVS table against
// the Services and EndpointSlices both ways. In the agent (a View) every
// EndpointSlice is read at most once per ipvsdrift.FullComparisonPeriod; a
// one-shot diagnose reads them once.
func dataplaneChecker(cfg Config, s shared, table ipvs.Interface) (check.Checker, error) {
	dc := ipvsdrift.Config{IPVS: table, ReadLink: kubeproxy.ReadLink, NodeName: cfg.NodeName, Settle: cfg.Settle, IPVSUse: s.use.Use,
		Root: cfg.Root, ConnPath: ipvs.ProcConnPath}
	if !cfg.Root.IsHost() {
		dc.ConnPath = "/proc/net/ip_vs_conn"
	}
	if s.endpoints != nil {
		dc.Services = s.services.Services
		dc.Endpoints = s.endpoints
	}
	return ipvsdrift.NewChecker(dc)
}

// builder collects checkers and the first construction error.
type builder struct {
	checkers []check.Checker
	err      error
}

func (b *builder) add(c check.Checker, err error) {
	switch {
	case b.err != nil:
	case err != nil:
		b.err = err
	default:
		b.checkers = append(b.checkers, c)
	}
}

// shared is what several checks read through: one kube-proxy client, one
// scheduler resolver, one distro, one way to read Services.
type shared struct {
	distro           distro.Distro
	kubeProxy        *kubeproxy.Client
	use              *kubeproxy.UseResolver
	schedulers       *kubeproxy.SchedulerResolver
	kubeProxyVersion kubeproxy.VersionSource
	services         ipvscheck.Cluster
	lbIPs            arpsysctl.LoadBalancerIPs
	interfaces       []string
	// endpoints is the one EndpointSlice reader of the data-plane checks
	// (ipvs-dataplane, nftables-dataplane): in the agent it reads every
	// EndpointSlice at most once per ipvsdrift.FullComparisonPeriod.
	endpoints *ipvsdrift.EndpointReader
}

// announcedBy returns the LoadBalancer IPs this node announces, from the
// agent's view (MetalLB's ServiceL2Status, already watched for the arp
// check: no read of its own); nil without a view.
func announcedBy(cfg Config) func(context.Context) (map[netip.Addr]bool, error) {
	c := cfg.Cluster
	if c == nil || c.View == nil {
		return nil
	}
	return func(context.Context) (map[netip.Addr]bool, error) {
		ings, err := c.View.LoadBalancerIngresses()
		if err != nil {
			return nil, err
		}
		out := map[netip.Addr]bool{}
		for _, in := range ings {
			if in.IP.IsValid() && in.AnnouncingNode == cfg.NodeName {
				out[in.IP] = true
			}
		}
		return out, nil
	}
}

// servicesFunc returns how the data-plane checks list Services (nil
// without a cluster).
func (s shared) servicesFunc() func(context.Context) ([]*corev1.Service, error) {
	if s.services == nil {
		return nil
	}
	return s.services.Services
}

func newShared(cfg Config) shared {
	addr := cfg.KubeProxyMetricsAddress
	if addr == "" {
		addr = kubeproxy.DefaultMetricsAddress
	}
	s := shared{distro: distro.Detect(cfg.Root), kubeProxy: kubeproxy.NewClient(addr, kubeproxy.DefaultTimeout)}
	// Whether the IPVS prerequisites apply (docs/design.md §3b): kube-proxy's mode,
	// asked once per pass and again at the next one; when kube-proxy does
	// not tell it, the node's configuration (RKE2's files, the kube-proxy
	// ConfigMap), then the kernel's state (of the running kernel: only
	// when --root is the host's).
	fallback := []kubeproxy.ModeSource{kubeproxy.RKE2Mode(cfg.Root)}
	if c := cfg.Cluster; c != nil && c.Client != nil {
		fallback = append(fallback, kubeproxy.ConfigMapMode(c.Client, nil))
	}
	if cfg.Root.IsHost() {
		fallback = append(fallback, kubeproxy.KernelMode(func() (kubeproxy.KernelState, error) {
			return kubeproxy.ReadKernelState(cfg.Root, kubeproxy.ReadLink)
		}))
	}
	s.use = kubeproxy.NewUseResolver(s.kubeProxy, 0, fallback...).WithAssumedMode(cfg.AssumeProxyMode)
	// The scheduler every check assumes (docs/design.md §8): --scheduler, else
	// kube-proxy's /configz, else its ConfigMap (with a cluster), else the
	// last one of them gave, else rr.
	sources := []kubeproxy.SchedulerSource{kubeproxy.ConfigzScheduler(s.kubeProxy)}
	if c := cfg.Cluster; c != nil && c.Client != nil {
		sources = append(sources, kubeproxy.Cached(kubeproxy.ConfigMapScheduler(c.Client), kubeproxy.ConfigMapTTL, nil))
		s.kubeProxyVersion = kubeproxy.NodeVersion(c.Client, cfg.NodeName)
		if c.View != nil {
			s.services = c.View.IPVSCluster()
		} else {
			s.services = ipvscheck.NewCluster(c.Client)
		}
		s.lbIPs = ipvscheck.LoadBalancerIPs(s.services)
		period := time.Duration(0)
		if c.View != nil {
			period = ipvsdrift.FullComparisonPeriod
		}
		s.endpoints = ipvsdrift.NewEndpointReader(c.Client, period)
	}
	s.schedulers = kubeproxy.NewSchedulerResolver(cfg.Scheduler, sources...)
	if cfg.ProbeInterface != "" {
		s.interfaces = []string{cfg.ProbeInterface}
	}
	return s
}

// scheduler is the modules check's view of the resolved scheduler.
func (s shared) scheduler(ctx context.Context) string {
	name, _ := s.schedulers.Resolve(ctx)
	return name
}

// arpChecker builds the arp check: over ProbeIPs when given, else over the
// cluster's LoadBalancer IPs (the agent's view, or one listed now), else
// with nothing to probe (it reports skipped).
func arpChecker(ctx context.Context, cfg Config) (check.Checker, error) {
	c := cfg.Cluster
	targets, err := arpcheck.ParseTargets(cfg.ProbeIPs, cfg.ProbeInterface)
	if err != nil {
		return nil, err
	}
	if len(targets) > 0 || cfg.ProbeInterface != "" {
		// Refuse what no probe can answer (this node's own, network and
		// broadcast addresses) and an interface that does not exist.
		local, err := arpcheck.HostInterfaces()
		if err != nil {
			return nil, err
		}
		if err := arpcheck.CheckTargets(targets, cfg.ProbeInterface, local); err != nil {
			return nil, err
		}
	}
	if len(cfg.ProbeIPs) > 0 || c == nil || c.Client == nil || (c.View == nil && c.Dynamic == nil) {
		return arpcheck.NewChecker(arpcheck.CheckerOptions{Targets: arpcheck.StaticTargets(targets...)})
	}
	view := c.View
	if view == nil {
		var err error
		if view, err = listOnce(ctx, cfg.NodeName, c); err != nil {
			return check.Func{CheckName: check.NameARP, Fn: func(context.Context) (check.Result, error) {
				return check.Result{}, fmt.Errorf("reading LoadBalancer IPs from the cluster: %w", err)
			}}, nil
		}
	}
	return view.ConflictCheck(c.ShardK, arpcheck.HostInterfaces, func(targets arpcheck.TargetSource) (*arpcheck.Checker, error) {
		return arpcheck.NewChecker(arpcheck.CheckerOptions{Targets: targets, Directory: view.MACDirectory()})
	})
}

// listOnce fills a view of the cluster (Services, this Node, MetalLB's
// ServiceL2Status) with one listing; its informers stop when it returns.
func listOnce(ctx context.Context, node string, c *Cluster) (*clusterview.View, error) {
	timeout := c.ListTimeout
	if timeout == 0 {
		timeout = DefaultListTimeout
	}
	view := clusterview.New(node, c.Client, c.Dynamic, c.Metadata)
	view.SetMetalLB(c.MetalLBNamespace, "", 0)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := view.Sync(sctx); err != nil {
		if c.LastError != nil {
			if last := c.LastError(); last != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("%w; last error talking to the API server: %w", err, last)
			}
		}
		return nil, err
	}
	return view, nil
}

// wholeRun is how long a one-shot run's first IPVS table read serves its
// later checks: the whole run (a failed read is not kept).
const wholeRun = time.Duration(math.MaxInt64)

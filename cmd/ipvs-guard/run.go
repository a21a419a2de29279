// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/agent"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck/shard"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/checkset"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/metrics"
	"github.com/ipvs-guard/ipvs-guard/pkg/metricsauth"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
	"github.com/ipvs-guard/ipvs-guard/pkg/server"
)

// runOptions are the flags of `ipvs-guard run` on top of the shared check flags.
type runOptions struct {
	checkOptions
	remediate bool
	// readinessInterval is how often the nftables-readiness report runs.
	readinessInterval time.Duration
	// removeOwnLeftovers removes ipvs-guard's own ipvs.conf once kube-proxy left IPVS mode.
	removeOwnLeftovers bool
	resyncPeriod       time.Duration
	metrics            metricsOptions
	healthAddr         string
	noUevents          bool
	initialDelay       time.Duration
	apiQPS             float32
	apiBurst           int
	profiling          bool
	peersService       string
	metallbTTL         time.Duration
}

func newRunCommand() *cobra.Command {
	var opts runOptions
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent: reconcile loop, Node conditions, Events and metrics",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return usageError{err}
			}
			if err := opts.metrics.validate(&opts.healthAddr); err != nil {
				return usageError{err}
			}
			if _, err := clusterview.ParsePeersService(opts.peersService); err != nil {
				return usageError{fmt.Errorf("--peers-service: %w", err)}
			}
			return runAgent(cmd.Context(), &opts)
		},
	}
	opts.addFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&opts.remediate, "remediate", false, "load missing modules and write the modules-load.d declaration file")
	f.DurationVar(&opts.resyncPeriod, "resync-period", agent.DefaultResyncPeriod, "re-run every check this often (kernel state has no watch)")
	f.DurationVar(&opts.readinessInterval, "nftables-readiness-interval", DefaultReadinessInterval, "run the nftables-readiness report (metrics only) at most this often; 0 turns it off")
	f.BoolVar(&opts.removeOwnLeftovers, "remove-own-ipvs-leftovers", false, "once kube-proxy runs a mode other than IPVS, remove the modules-load.d file ipvs-guard wrote (only if nothing else is in it)")
	opts.metrics.addFlags(f)
	f.StringVar(&opts.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (\"0\" disables it; the chart binds the node's IP, which the kubelet probes)")
	f.BoolVar(&opts.noUevents, "no-uevents", false, "do not listen for kernel module uevents (rely on the resync period)")
	f.DurationVar(&opts.initialDelay, "initial-publish-delay", agent.DefaultInitialPublishDelay, "publish conditions after this long even if a check has not finished")
	f.Float32Var(&opts.apiQPS, "kube-api-qps", 5, "queries per second to the API server")
	f.IntVar(&opts.apiBurst, "kube-api-burst", 10, "burst of queries to the API server")
	f.StringVar(&opts.peersService, "peers-service", "", "namespace/name of the headless Service selecting the agents' pods: its ready endpoints' nodes are the peers ARP probes are sharded over (the chart sets it); without it this node probes every LoadBalancer IP it does not announce")
	f.DurationVar(&opts.metallbTTL, "metallb-state-ttl", clusterview.MetalLBStateTTL, "reuse what was read of MetalLB's state and the Nodes for this long (read at start, while an IP this node probes is unanswered or claimed twice, when an announcer changes, and every 5 TTLs for IPs with preferredNodeSelectors)")
	f.BoolVar(&opts.profiling, "profiling", false, "serve Go's /debug/pprof on the health probe address (for measuring the agent's memory and CPU)")
	return cmd
}

// clusterClients builds the typed client (protobuf, as kube-proxy and
// kubelet speak: a fraction of JSON's bytes and decoding time on every watch
// event; only the resources ipvs-guard uses, see pkg/kube), the dynamic
// client (MetalLB's CRD, JSON) and the metadata client (Node metadata, read
// when an ARP probe needs another node's MACs).
func clusterClients(cfg *rest.Config) (kube.Interface, dynamic.Interface, metadata.Interface, error) {
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kube.NewForConfig(pb)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("building dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("building metadata client: %w", err)
	}
	return cs, dyn, meta, nil
}

// DefaultReadinessInterval is how often the agent really runs the
// nftables-readiness report: what it reads changes with a kernel upgrade, a
// modprobe.d edit, a kube-proxy upgrade or reconfiguration, not with
// traffic, and it is an advisory (metrics, an info alert), so an hour is
// fresh enough; each real run costs a private network namespace, about ten
// netlink batches (under 20 ms measured) and one walk of the IPVS
// connection table, so 24 a day stay far below what kube-proxy itself does.
const DefaultReadinessInterval = time.Hour

// agentGCPercent is the agent's GOGC unless the environment sets one: its
// heap is mostly long-lived informer caches (Services, its own Node and the
// agents' peers EndpointSlices: about 15 MiB with 1,000 Nodes and 5,000
// Services), and the runtime keeps up to
// 1 + GOGC/100 times the live heap. 50 kept RSS about 15 % under the
// default 100 (make test-scale: 44 instead of 54 MiB at 300 nodes and
// 1,000 Services) for about 3 millicores; 25 keeps another 3–4 MiB off
// at 1,000 nodes (make bench-scale; docs/scale.md states
// the garbage collector's CPU share measured with it).
const agentGCPercent = 25

func runAgent(ctx context.Context, opts *runOptions) error {
	logger := klog.FromContext(ctx)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(agentGCPercent)
	}
	node := opts.node()
	if node == "" {
		return errors.New("no node name: set NODE_NAME or --node-name")
	}
	cs, view, err := connect(ctx, opts, node)
	if err != nil {
		return err
	}
	reg, am, err := metrics.NewRegistry()
	if err != nil {
		return err
	}
	cc, checkers, err := buildChecks(ctx, opts, cs, view, am)
	if err != nil {
		return err
	}

	recorder := kube.NewRecorder(cs, nodestatus.ReportingController)
	mgr, err := nodestatus.NewManager(nodestatus.ManagerConfig{
		NodeName:   node,
		Client:     nodestatus.NewClient(cs),
		Recorder:   recorder,
		CachedNode: view.Node,
	})
	if err != nil {
		return err
	}
	var dirs []string
	for _, d := range agent.DefaultModulesLoadDirs {
		dirs = append(dirs, cc.Root.Path(d))
	}
	a, err := agent.New(agent.Config{
		NodeName:            node,
		Checkers:            checkers,
		Publisher:           mgr,
		View:                view,
		ResyncPeriod:        opts.resyncPeriod,
		InitialPublishDelay: opts.initialDelay,
		ModulesLoadDirs:     dirs,
		WatchUevents:        !opts.noUevents, // hostNetwork: the host's uevents, whatever --root is
		MACs:                nodestatus.HostMACs,
		DownMACs:            nodestatus.HostDownMACs,
	})
	if err != nil {
		return err
	}
	if err := reg.Register(metrics.NewCollector(metrics.StoreSnapshot(a.Store(), a.Enabled()))); err != nil {
		return fmt.Errorf("registering state metrics: %w", err)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { recorder.Run(gctx); return nil })
	reviews, _ := cs.(kube.ReviewInterface) // *kube.Clientset is one
	if err := serve(gctx, g, opts, a, reg, reviews); err != nil {
		return err
	}
	g.Go(func() error { mgr.Run(gctx); return nil })
	g.Go(func() error { return a.Run(gctx) })
	logger.Info("ipvs-guard agent running", "node", node, "checks", a.Enabled(), "remediate", opts.remediate)
	return waitBounded(ctx, g.Wait, shutdownTimeout)
}

// connect builds the API clients (user agent ipvs-guard, --kube-api-qps
// and --kube-api-burst) and the cluster view over them, its peers from
// --peers-service; nothing is started.
func connect(ctx context.Context, opts *runOptions, node string) (kube.Interface, *clusterview.View, error) {
	cfg, origin, _, err := clusterConfig(opts.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	klog.FromContext(ctx).Info("Reading the cluster", "config", origin.String(), "server", cfg.Host)
	cfg.UserAgent = "ipvs-guard"
	cfg.QPS, cfg.Burst = opts.apiQPS, opts.apiBurst
	cs, dyn, meta, err := clusterClients(cfg)
	if err != nil {
		return nil, nil, err
	}
	peers, err := clusterview.ParsePeersService(opts.peersService)
	if err != nil {
		return nil, nil, err
	}
	view := clusterview.New(node, cs, dyn, meta)
	view.UsePeersService(peers)
	view.SetMetalLB(opts.metallbNS, "", opts.metallbTTL)
	if peers.Name == "" {
		klog.FromContext(ctx).Info("No --peers-service: this node probes every LoadBalancer IP it does not announce (not sharded)")
	}
	return cs, view, nil
}

// buildChecks builds the agent's checks over the view, each instrumented
// with am; with --remediate, module loads are counted too.
func buildChecks(ctx context.Context, opts *runOptions, cs kube.Interface, view *clusterview.View, am *metrics.Metrics) (checkset.Config, []check.Checker, error) {
	cc := opts.config(opts.remediate)
	if opts.remediate {
		// Count every module load; without a loader for this root the
		// modules check reports why it cannot load.
		if nl, err := modules.NewNativeLoader(cc.Root); err == nil {
			cc.Loader = metrics.CountingLoader{Loader: nl, Metrics: am}
		}
	}
	cc.Cluster = &checkset.Cluster{Client: cs, View: view, ShardK: shard.DefaultK}
	cc.ReadinessInterval = opts.readinessInterval
	cc.RemoveOwnLeftovers = opts.removeOwnLeftovers
	// A virtual server kube-proxy has not programmed yet is lag, not a
	// problem: it counts once it stayed missing for kube-proxy's sync period.
	cc.Settle = &check.Settler{Grace: ipvscheck.DefaultSettle}
	checkers, err := checkset.Build(ctx, cc)
	if err != nil {
		return cc, nil, err
	}
	for i, c := range checkers {
		checkers[i] = metrics.Instrument(c, am)
	}
	return cc, checkers, nil
}

// serve starts, in g, the health probe server and the metrics server ("0"
// disables either). Plain-HTTP metrics on the health address share its
// server; HTTPS metrics need their own address.
func serve(ctx context.Context, g *errgroup.Group, opts *runOptions, a *agent.Agent, reg *prometheus.Registry, reviews kube.ReviewInterface) error {
	m := &opts.metrics
	if opts.healthAddr != "0" {
		srv, err := server.New(opts.healthAddr, healthz(a, opts.resyncPeriod), readyz(a))
		if err != nil {
			return err
		}
		if m.addr == opts.healthAddr {
			srv.Handle("/metrics", metrics.Handler(reg))
		}
		if opts.profiling {
			srv.HandleProfiling()
		}
		g.Go(func() error { return srv.Run(ctx) })
	}
	if m.addr == "0" || m.addr == opts.healthAddr {
		return nil
	}
	if !m.secure {
		// The probes are served here too.
		srv, err := server.New(m.addr, healthz(a, opts.resyncPeriod), readyz(a))
		if err != nil {
			return err
		}
		srv.Handle("/metrics", metrics.Handler(reg))
		g.Go(func() error { return srv.Run(ctx) })
		return nil
	}
	srv, err := m.secureServer(ctx, opts.node(), reg, reviews)
	if err != nil {
		return err
	}
	g.Go(func() error { return srv.Run(ctx) })
	return nil
}

// shutdownTimeout bounds how long `run` waits after SIGTERM for its loop,
// HTTP servers and informers to stop (docs/design.md §8: "within a few seconds"),
// well inside Kubernetes' default 30 s grace period, whatever the API
// server does.
const shutdownTimeout = 4 * time.Second

// waitBounded returns wait's error if it returns before ctx ends (a
// component failed). Once ctx ended it waits at most timeout more for
// wait, then returns nil: what is still stopping is not worth a kill.
func waitBounded(ctx context.Context, wait func() error, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- wait() }()
	select {
	case err := <-errc:
		if ctx.Err() == nil {
			return err
		}
		return nil
	case <-ctx.Done():
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-errc:
	case <-t.C:
		klog.FromContext(ctx).Info("Exiting before every component stopped", "waited", timeout)
	}
	return nil
}

// healthz fails when the worker has not finished a sync for three resync periods.
func healthz(a *agent.Agent, resync time.Duration) server.Check {
	started := time.Now()
	return func() error {
		last := a.LastSync()
		if last.IsZero() {
			last = started
		}
		if d := time.Since(last); d > 3*resync+time.Minute {
			return fmt.Errorf("no sync finished for %s", d.Round(time.Second))
		}
		return nil
	}
}

// readyz passes once the first full set of conditions was published.
func readyz(a *agent.Agent) server.Check {
	return func() error {
		if !a.Ready() {
			return errors.New("first check pass not finished")
		}
		return nil
	}
}

// metricsOptions are the flags of the metrics endpoint.
type metricsOptions struct {
	addr string
	// secure serves HTTPS, each scrape authenticated and authorized by the
	// API server (pkg/metricsauth).
	secure            bool
	certFile, keyFile string
}

func (m *metricsOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&m.addr, "metrics-bind-address", ":8080", "address of the /metrics endpoint, host:port (\"0\" disables it; an IPv6 host may be given without brackets, as $(HOST_IP):9473 expands to)")
	f.BoolVar(&m.secure, "metrics-secure", true, "serve /metrics over HTTPS and let a scrape through only with a bearer token the API server authenticates (TokenReview) for a user it authorizes to get the non-resource URL /metrics (SubjectAccessReview); answers are cached 2 min per token and 5 min per authorization. false serves plain HTTP to anyone who reaches the address")
	f.StringVar(&m.certFile, "metrics-tls-cert-file", "", "PEM certificate (chain) of the HTTPS metrics endpoint, read again when it changes; empty: a self-signed certificate generated in memory at start")
	f.StringVar(&m.keyFile, "metrics-tls-key-file", "", "PEM private key of --metrics-tls-cert-file")
}

// validate checks the metrics flags and brackets an IPv6 host in them and
// in *healthAddr.
func (m *metricsOptions) validate(healthAddr *string) error {
	var err error
	if m.addr, err = bindAddress(m.addr); err != nil {
		return usageError{fmt.Errorf("--metrics-bind-address: %w", err)}
	}
	if *healthAddr, err = bindAddress(*healthAddr); err != nil {
		return usageError{fmt.Errorf("--health-probe-bind-address: %w", err)}
	}
	if (m.certFile == "") != (m.keyFile == "") {
		return usageError{errors.New("--metrics-tls-cert-file and --metrics-tls-key-file go together")}
	}
	if m.certFile != "" && !m.secure {
		return usageError{errors.New("--metrics-tls-cert-file needs --metrics-secure (plain HTTP uses no certificate)")}
	}
	if m.secure && m.addr != "0" && m.addr == *healthAddr {
		return usageError{errors.New("with --metrics-secure, --metrics-bind-address must differ from --health-probe-bind-address (the kubelet probes health over plain HTTP)")}
	}
	return nil
}

// bindAddress returns addr as net.Listen takes it: "0" (disabled) and
// host:port as they are, and an IPv6 address followed by :port (what
// $(HOST_IP):9473 expands to on an IPv6 node) bracketed.
func bindAddress(addr string) (string, error) {
	if addr == "0" {
		return addr, nil
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr, nil
	}
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		if ip, err := netip.ParseAddr(addr[:i]); err == nil && ip.Is6() {
			if _, err := strconv.ParseUint(addr[i+1:], 10, 16); err == nil {
				return net.JoinHostPort(addr[:i], addr[i+1:]), nil
			}
		}
	}
	return "", fmt.Errorf("%q is not host:port", addr)
}

// secureServer returns the HTTPS metrics server: /metrics behind the API
// server's authentication and authorization, nothing else.
func (m *metricsOptions) secureServer(ctx context.Context, node string, reg *prometheus.Registry, reviews kube.ReviewInterface) (*server.Server, error) {
	if reviews == nil {
		return nil, errors.New("--metrics-secure: the API client cannot send TokenReviews")
	}
	filter, err := metricsauth.New(metricsauth.Options{Reviews: reviews})
	if err != nil {
		return nil, err
	}
	topts := server.TLSOptions{CertFile: m.certFile, KeyFile: m.keyFile, Host: node}
	if host, _, err := net.SplitHostPort(m.addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			topts.IPs = []net.IP{ip}
		}
	}
	tlsCfg, err := server.NewTLSConfig(topts)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	srv, err := server.NewMux(m.addr)
	if err != nil {
		return nil, err
	}
	srv.UseTLS(tlsCfg)
	srv.Handle("/metrics", filter.Wrap(metrics.Handler(reg)))
	how := "self-signed certificate"
	if m.certFile != "" {
		how = m.certFile
	}
	klog.FromContext(ctx).Info("Serving metrics over HTTPS, scrapes authorized by the API server", "addr", srv.Addr(), "certificate", how)
	return srv, nil
}

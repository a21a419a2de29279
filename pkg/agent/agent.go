// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
	"github.com/ipvs-guard/ipvs-guard/pkg/results"
)

// Key is a workqueue key: a check name, or KeyNode.
type Key string

// KeyNode re-publishes what the agent writes on its Node (MACs, conditions).
const KeyNode Key = "node"

// Defaults of Config.
const (
	DefaultResyncPeriod        = time.Minute
	DefaultCheckTimeout        = time.Minute
	DefaultInitialPublishDelay = 10 * time.Second
	// DefaultClusterCoalesce is how long a check woken by a cluster change
	// (a Service, a ServiceL2Status) waits for more: under churn every
	// node then runs it about once a second, not once per watch event,
	// and a kernel event still wakes its check at once.
	DefaultClusterCoalesce = time.Second
)

// Publisher receives the desired Node state; nodestatus.Manager implements
// it. Calls must not block on the API server.
type Publisher interface {
	SetConditions(conds []nodestatus.Condition)
	SetAnnotation(key, value string)
}

// Config configures an Agent.
type Config struct {
	// NodeName is the agent's own Node.
	NodeName string
	// Checkers are run by the loop, keyed by their Name.
	Checkers []check.Checker
	// Store receives every result; nil creates one over Checkers.
	Store *results.Store
	// Publisher receives conditions and the MAC annotation; nil publishes nothing.
	Publisher Publisher
	// View is the cluster view whose informers wake the loop; Run starts
	// them. Nil runs node-local only.
	View *clusterview.View
	// Clock drives the resync ticker, the initial publish delay and the
	// workqueue's backoff; nil means the real clock.
	Clock clock.WithTicker
	// ResyncPeriod re-runs every check (default DefaultResyncPeriod).
	ResyncPeriod time.Duration
	// CheckTimeout bounds one check run (default DefaultCheckTimeout).
	CheckTimeout time.Duration
	// InitialPublishDelay: conditions are first published once every check
	// ran once, or after this delay with the missing ones Unknown.
	InitialPublishDelay time.Duration
	// ModulesLoadDirs are watched with inotify (host paths already under the
	// root); missing ones are retried every resync.
	ModulesLoadDirs []string
	// WatchUevents wakes the modules and ipvs checks on module uevents.
	WatchUevents bool
	// MACs returns this node's interface MACs for nodestatus.MACsAnnotation; nil publishes none.
	MACs func() (map[string]string, error)
	// DownMACs returns the MACs of this node's interfaces that are down, for
	// nodestatus.DownMACsAnnotation; nil publishes none.
	DownMACs func() (map[string]string, error)
	// ClusterCoalesce delays the checks a cluster change wakes, so a burst
	// of changes runs them once (default DefaultClusterCoalesce).
	ClusterCoalesce time.Duration
}

// Agent is the node reconcile loop. Build it with New, then call Run once.
type Agent struct {
	cfg      Config
	checkers map[Key]check.Checker
	enabled  []string
	store    *results.Store
	queue    workqueue.TypedRateLimitingInterface[Key]
	view     *clusterview.View

	// published turns true once conditions were first handed to the publisher.
	published atomic.Bool
	// viewSynced reports whether the view's caches completed their first
	// list (nil without a view; a seam for tests).
	viewSynced func() bool
	// syncedAt is the unix-nano time the view's caches were first seen
	// synced (0 until then). The first publication waits for a run of every
	// check that started after it, so no check publishes a result it
	// computed from empty caches (an Unknown, or a message that changes a
	// moment later: two Node writes per agent start instead of one).
	syncedAt atomic.Int64
	// lastSync is the unix-nano time of the last finished sync (liveness).
	lastSync atomic.Int64
	// publishMu makes reading the results and handing the conditions to the
	// publisher one step: workers and the initial publish timer publish
	// concurrently, and a set computed earlier must never be handed over
	// after one computed later.
	publishMu sync.Mutex
}

// New builds an Agent; it starts nothing.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("agent: node name is empty")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.InitialPublishDelay <= 0 {
		cfg.InitialPublishDelay = DefaultInitialPublishDelay
	}
	if cfg.ClusterCoalesce <= 0 {
		cfg.ClusterCoalesce = DefaultClusterCoalesce
	}
	a := &Agent{cfg: cfg, checkers: map[Key]check.Checker{}}
	for _, c := range cfg.Checkers {
		if _, dup := a.checkers[Key(c.Name())]; dup {
			return nil, fmt.Errorf("agent: two checkers named %q", c.Name())
		}
		if Key(c.Name()) == KeyNode {
			return nil, fmt.Errorf("agent: checker name %q is reserved", c.Name())
		}
		// Bounded: a check stuck in a call that ignores its context can
		// neither hold its worker past CheckTimeout nor delay shutdown.
		a.checkers[Key(c.Name())] = check.Bound(c)
		a.enabled = append(a.enabled, c.Name())
	}
	a.store = cfg.Store
	if a.store == nil {
		a.store = results.NewStore(a.enabled...)
	}
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[Key](500*time.Millisecond, max(cfg.ResyncPeriod, 5*time.Second)),
		workqueue.TypedRateLimitingQueueConfig[Key]{Name: "ipvs-guard", Clock: cfg.Clock})
	if cfg.View != nil {
		a.view = cfg.View
		a.viewSynced = cfg.View.HasSynced
		a.addHandlers()
	}
	return a, nil
}

// Store returns the results store the loop writes (the metrics collector reads it).
func (a *Agent) Store() *results.Store { return a.store }

// View returns the cluster view (nil without a Client).
func (a *Agent) View() *clusterview.View { return a.view }

// Enabled returns the names of the checks the loop runs.
func (a *Agent) Enabled() []string { return append([]string(nil), a.enabled...) }

// Ready reports whether the agent has published its first full set of
// conditions (every check ran once, or the initial delay passed).
func (a *Agent) Ready() bool { return a.published.Load() }

// LastSync returns when a worker last finished a sync (zero before the first).
func (a *Agent) LastSync() time.Time {
	n := a.lastSync.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (a *Agent) addHandlers() {
	lbKeys := []Key{check.NameIPVS, check.NameARPSysctls, check.NameARP}
	a.view.AddServiceHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if isLB(obj) {
				a.enqueueCoalesced(lbKeys...)
			}
		},
		UpdateFunc: func(old, cur any) {
			if isLB(old) || isLB(cur) {
				a.enqueueCoalesced(lbKeys...)
			}
		},
		DeleteFunc: func(obj any) {
			if isLB(obj) {
				a.enqueueCoalesced(lbKeys...)
			}
		},
	})
	// A peer that comes, goes or turns unready moves shares of the IPs.
	a.view.OnPeersChange(func() { a.enqueueCoalesced(check.NameARP) })
	a.view.AddNodeHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			n, ok := obj.(*corev1.Node)
			return ok && n.Name == a.cfg.NodeName
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { a.enqueue(KeyNode) },
			UpdateFunc: func(any, any) { a.enqueue(KeyNode) },
		},
	})
}

func isLB(obj any) bool {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*corev1.Service)
	return ok && s.Spec.Type == corev1.ServiceTypeLoadBalancer
}

func (a *Agent) enqueue(keys ...Key) {
	for _, k := range keys {
		if k == KeyNode || a.checkers[k] != nil {
			a.queue.Add(k)
		}
	}
}

// enqueueCoalesced adds keys after ClusterCoalesce; a key already waiting
// keeps its earlier time, so a burst of changes runs each check once.
func (a *Agent) enqueueCoalesced(keys ...Key) {
	for _, k := range keys {
		if a.checkers[k] != nil {
			a.queue.AddAfter(k, a.cfg.ClusterCoalesce)
		}
	}
}

func (a *Agent) enqueueAll() {
	for _, n := range a.enabled {
		a.queue.Add(Key(n))
	}
	a.queue.Add(KeyNode)
}

// Run runs the loop until ctx is done. It never waits for the API server:
// checks start at once; cluster-dependent data comes from the view as
// soon as the caches fill.
func (a *Agent) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer a.queue.ShutDown()

	if a.view != nil {
		a.view.Start(ctx.Done())
		defer func() {
			if !a.view.Shutdown() {
				logger.Info("Not waiting longer for the cluster informers to stop", "waited", a.view.StopTimeout())
			}
		}()
		a.discoverL2(ctx)
	}

	var dirs *dirWatcher
	if len(a.cfg.ModulesLoadDirs) > 0 && a.checkers[check.NameModules] != nil {
		w, err := newDirWatcher(a.cfg.ModulesLoadDirs)
		if err != nil {
			logger.Error(err, "Not watching modules-load.d; relying on the resync period")
		} else {
			dirs = w
			dirs.Rescan(ctx)
			wg.Add(1)
			go func() {
				defer wg.Done()
				dirs.Run(ctx, func(ev fsnotify.Event) {
					logger.V(4).Info("modules-load.d changed", "path", ev.Name, "op", ev.Op.String())
					a.enqueue(check.NameModules)
				})
			}()
		}
	}
	if a.cfg.WatchUevents && (a.checkers[check.NameModules] != nil || a.checkers[check.NameIPVS] != nil) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := WatchModuleUevents(ctx, func(ev ModuleEvent) {
				logger.V(4).Info("Module uevent", "module", ev.Module, "action", ev.Action)
				a.enqueue(check.NameModules, check.NameIPVS)
			})
			if err != nil {
				logger.Error(err, "Not watching module uevents; relying on the resync period")
			}
		}()
	}

	a.enqueueAll()
	if a.viewSynced != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.awaitViewSync(ctx) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); a.resyncLoop(ctx, dirs) }()
	go func() { defer wg.Done(); a.initialPublishTimer(ctx) }()
	a.startWorkers(ctx, &wg)
	logger.Info("Agent started", "checks", a.enabled, "resyncPeriod", a.cfg.ResyncPeriod)
	<-ctx.Done()
	logger.Info("Agent stopping")
	return nil
}

// workers is how many keys the loop processes at once: one per key (every
// check and KeyNode). The workqueue never hands one key to two workers, so
// each check runs at most once at a time, and a check that runs long (an
// ARP round over thousands of silent IPs, up to CheckTimeout) holds only its
// own worker: a module event is checked and published at once.
func (a *Agent) workers() int { return len(a.checkers) + 1 }

func (a *Agent) startWorkers(ctx context.Context, wg *sync.WaitGroup) {
	for range a.workers() {
		wg.Go(func() {
			for a.processNextWorkItem(ctx) {
			}
		})
	}
}

func (a *Agent) resyncLoop(ctx context.Context, dirs *dirWatcher) {
	t := a.cfg.Clock.NewTicker(a.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if dirs != nil {
				dirs.Rescan(ctx)
			}
			if a.view != nil {
				a.discoverL2(ctx)
			}
			a.enqueueAll()
		}
	}
}

// awaitViewSync notes when the view's caches first synced and runs every
// check again then, for the first publication (see syncedAt).
func (a *Agent) awaitViewSync(ctx context.Context) {
	if !cache.WaitForCacheSync(ctx.Done(), a.viewSynced) {
		return
	}
	a.syncedAt.Store(a.cfg.Clock.Now().UnixNano())
	klog.FromContext(ctx).V(2).Info("Cluster caches synced; running every check again before the first publication")
	a.enqueueAll()
}

func (a *Agent) initialPublishTimer(ctx context.Context) {
	t := a.cfg.Clock.NewTimer(a.cfg.InitialPublishDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
		if !a.published.Load() {
			klog.FromContext(ctx).Info("Publishing conditions before every check finished", "delay", a.cfg.InitialPublishDelay)
			a.publish(true)
		}
	}
}

// discoverL2 starts the ServiceL2Status informer once discovery shows the
// CRD; its changes wake the ARP check.
func (a *Agent) discoverL2(ctx context.Context) {
	a.view.StartL2(ctx, func() { a.enqueueCoalesced(check.NameARP) })
}

func (a *Agent) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(key)
	err := a.sync(ctx, key)
	a.lastSync.Store(a.cfg.Clock.Now().UnixNano())
	if err == nil {
		a.queue.Forget(key)
		return true
	}
	if errors.Is(err, clusterview.ErrNotSynced) {
		// Expected while the caches fill (or the API server is away).
		klog.FromContext(ctx).V(2).Info("Cluster caches not synced; requeuing with backoff", "key", key)
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "Sync failed; requeuing with backoff", "key", key)
	}
	a.queue.AddRateLimited(key)
	return true
}

// sync re-reads current state for key; it never uses an event's payload.
func (a *Agent) sync(ctx context.Context, key Key) error {
	if key == KeyNode {
		return a.syncNode(ctx)
	}
	c := a.checkers[key]
	if c == nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("check", c.Name())
	cctx, cancel := context.WithTimeout(klog.NewContext(ctx, logger), a.cfg.CheckTimeout)
	defer cancel()
	start := a.cfg.Clock.Now()
	res, err := c.Run(cctx)
	d := a.cfg.Clock.Since(start)
	if ctx.Err() != nil {
		// Shutting down: keep the last result, but say what a run cut
		// short had already changed on the node.
		if acts := check.ActionsOf(err); len(acts) > 0 {
			logger.Info("Check interrupted by shutdown after changing the node", "actions", acts)
		}
		return nil
	}
	if err != nil {
		res = check.Errored(c.Name(), err)
	}
	res.Name = c.Name()
	a.store.Record(c.Name(), res, err, start, d)
	logger.V(3).Info("Check ran", "status", res.Status, "reason", res.Reason, "duration", d)
	a.publish(false)
	if err != nil {
		return fmt.Errorf("running check %s: %w", c.Name(), err)
	}
	return nil
}

func (a *Agent) syncNode(ctx context.Context) error {
	if a.cfg.Publisher == nil {
		return nil
	}
	a.publish(false)
	if a.cfg.MACs == nil {
		return nil
	}
	macs, err := a.cfg.MACs()
	if err != nil {
		return fmt.Errorf("reading interface MACs: %w", err)
	}
	a.cfg.Publisher.SetAnnotation(nodestatus.MACsAnnotation, nodestatus.EncodeMACs(macs))
	if a.cfg.DownMACs == nil {
		return nil
	}
	down, err := a.cfg.DownMACs()
	if err != nil {
		return fmt.Errorf("reading down interfaces' MACs: %w", err)
	}
	a.cfg.Publisher.SetAnnotation(nodestatus.DownMACsAnnotation, nodestatus.EncodeMACs(down))
	return nil
}

// publish hands the conditions derived from the latest results to the
// publisher, once every check ran (or force, after the initial delay).
func (a *Agent) publish(force bool) {
	a.publishMu.Lock()
	defer a.publishMu.Unlock()
	if a.cfg.Publisher == nil {
		if force || a.readyToPublish() {
			a.published.Store(true)
		}
		return
	}
	if !a.published.Load() && !force && !a.readyToPublish() {
		return
	}
	a.published.Store(true)
	a.cfg.Publisher.SetConditions(nodestatus.Conditions(a.store.Snapshot(), a.enabled))
}

// readyToPublish: every check ran, and with a view, ran after its caches
// synced (the initial delay forces publication if they never do).
func (a *Agent) readyToPublish() bool {
	if a.viewSynced == nil {
		return a.store.AllRan()
	}
	t := a.syncedAt.Load()
	return t != 0 && a.store.AllRanSince(time.Unix(0, t))
}

// Conditions returns the Node conditions computed from the latest results
// (what the publisher was last handed, or would be).
func (a *Agent) Conditions() []nodestatus.Condition {
	return nodestatus.Conditions(a.store.Snapshot(), a.enabled)
}

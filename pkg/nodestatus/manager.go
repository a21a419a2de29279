// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// ReportingController is the reporting controller of every Event ipvs-guard emits.
const ReportingController = "ipvs-guard"

// Default retry backoff of the Manager's Run loop after a failed write.
const (
	DefaultMinRetry = time.Second
	DefaultMaxRetry = 30 * time.Second
)

// requestTimeout bounds each API call the Manager makes.
const requestTimeout = 10 * time.Second

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// NodeName is the agent's own Node.
	NodeName string
	// Client writes to the API server.
	Client Client
	// Recorder emits one Event per transition; nil records none.
	Recorder kube.EventRecorder
	// Clock stamps transition times and drives retries; nil means the real clock.
	Clock clock.WithTicker
	// CachedNode, when set, returns the Node from an informer cache so that a
	// sync with nothing to write makes no API request at all. A stale cache
	// costs at most one conflict, after which the Manager reads the live Node.
	CachedNode func() (*corev1.Node, error)
	// HeartbeatPeriod, when positive, rewrites every owned condition once it
	// is older than this (lastHeartbeatTime). Zero: no heartbeat writes.
	HeartbeatPeriod time.Duration
	// MinRetry and MaxRetry bound the exponential backoff after a failed
	// write (defaults DefaultMinRetry, DefaultMaxRetry).
	MinRetry, MaxRetry time.Duration
}

// Manager publishes the desired conditions and annotations on the agent's Node.
//
// It makes sure that
//  1. only ipvs-guard's condition types are in the status patch (a strategic
//     merge keyed by type), so kubelet's conditions are never touched;
//  2. nothing is written when the Node already shows the desired state;
//  3. lastTransitionTime changes only when a condition's status changes;
//  4. an owned condition absent from the desired set is deleted from the Node;
//  5. each status change observed on the API server produces exactly one
//     Event, emitted after the write succeeded (Warning into True, Normal
//     from True to False);
//  6. conflicts are retried against a fresh read, and failed writes are
//     retried by Run with backoff, so the Node catches up after an outage.
//
// Desired state is set by the agent loop (SetConditions, SetAnnotation) from
// any goroutine; the write path (Sync) is serialised by syncMu.
type Manager struct {
	cfg ManagerConfig

	// mu guards desired, haveDesired, annotations and wake-up bookkeeping.
	mu          sync.Mutex
	desired     map[ConditionType]Condition
	haveDesired bool
	annotations map[string]string

	// syncMu serialises Sync; it guards lastWritten and lastWrittenFrom.
	syncMu sync.Mutex
	// lastWritten is the Node our last successful status write returned, and
	// lastWrittenFrom the resourceVersion that write was based on: while the
	// cache still shows lastWrittenFrom, lastWritten is newer.
	lastWritten     *corev1.Node
	lastWrittenFrom string

	// stateMu guards lastSync and lastErr.
	stateMu  sync.Mutex
	lastSync time.Time
	lastErr  error

	wake chan struct{}
}

// NewManager returns a Manager for cfg.NodeName.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("node status manager: node name is empty")
	}
	if cfg.Client == nil {
		return nil, errors.New("node status manager: client is nil")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MinRetry <= 0 {
		cfg.MinRetry = DefaultMinRetry
	}
	if cfg.MaxRetry < cfg.MinRetry {
		cfg.MaxRetry = max(DefaultMaxRetry, cfg.MinRetry)
	}
	return &Manager{
		cfg:         cfg,
		desired:     map[ConditionType]Condition{},
		annotations: map[string]string{},
		wake:        make(chan struct{}, 1),
	}, nil
}

// SetConditions replaces the desired conditions. Owned types missing from
// conds are removed from the Node; LastTransitionTime is ignored (the Manager
// derives it). It never blocks on the API server.
func (m *Manager) SetConditions(conds []Condition) {
	m.mu.Lock()
	m.desired = make(map[ConditionType]Condition, len(conds))
	for _, c := range conds {
		c.LastTransitionTime = time.Time{}
		m.desired[c.Type] = c
	}
	m.haveDesired = true
	m.mu.Unlock()
	m.poke()
}

// SetAnnotation sets the desired value of an annotation on the Node; it is
// written with a metadata merge patch only when the Node shows another value.
func (m *Manager) SetAnnotation(key, value string) {
	m.mu.Lock()
	m.annotations[key] = value
	m.mu.Unlock()
	m.poke()
}

// LastSync returns when the Node last matched the desired state and the last
// write error (nil once a later sync succeeded).
func (m *Manager) LastSync() (time.Time, error) {
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	return m.lastSync, m.lastErr
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run syncs whenever the desired state changes, retrying failed writes with
// exponential backoff on the injected clock (MaxRetry bounds how long the
// Node lags behind after an outage), until ctx is done.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("node", m.cfg.NodeName)
	var (
		retryC  <-chan time.Time
		timer   clock.Timer
		backoff = m.cfg.MinRetry
		beatC   <-chan time.Time
	)
	if m.cfg.HeartbeatPeriod > 0 {
		t := m.cfg.Clock.NewTicker(m.cfg.HeartbeatPeriod)
		defer t.Stop()
		beatC = t.C()
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// While backing off after a failure, changes wait for the retry
		// timer (which writes the latest desired state) instead of
		// hammering an API server that is down.
		wake := m.wake
		if timer != nil {
			wake = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-retryC:
		case <-beatC:
		}
		if timer != nil {
			timer.Stop()
			timer, retryC = nil, nil
		}
		if err := m.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			logger.Error(err, "Publishing node status failed; will retry", "retryIn", backoff)
			timer = m.cfg.Clock.NewTimer(backoff)
			retryC = timer.C()
			backoff = min(2*backoff, m.cfg.MaxRetry)
			continue
		}
		backoff = m.cfg.MinRetry
	}
}

// Sync makes the Node show the desired conditions and annotations, writing
// only what differs. Before the first SetConditions it writes no conditions.
func (m *Manager) Sync(ctx context.Context) error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	err := m.sync(ctx)
	m.stateMu.Lock()
	m.lastErr = err
	if err == nil {
		m.lastSync = m.cfg.Clock.Now()
	}
	m.stateMu.Unlock()
	return err
}

func (m *Manager) sync(ctx context.Context) error {
	m.mu.Lock()
	desired := make(map[ConditionType]Condition, len(m.desired))
	for k, v := range m.desired {
		desired[k] = v
	}
	haveDesired := m.haveDesired
	annotations := make(map[string]string, len(m.annotations))
	for k, v := range m.annotations {
		annotations[k] = v
	}
	m.mu.Unlock()

	node, err := m.currentNode(ctx)
	if err != nil {
		return err
	}
	if node, err = m.syncAnnotations(ctx, node, annotations); err != nil {
		return err
	}
	if !haveDesired {
		return nil
	}
	return m.syncConditions(ctx, node, desired)
}

// currentNode returns the freshest Node it knows without an API request when
// a cache is configured.
func (m *Manager) currentNode(ctx context.Context) (*corev1.Node, error) {
	if m.cfg.CachedNode != nil {
		n, err := m.cfg.CachedNode()
		if err == nil && n != nil {
			if m.lastWritten != nil && n.ResourceVersion == m.lastWrittenFrom {
				return m.lastWritten, nil
			}
			return n, nil
		}
	}
	return m.getLive(ctx)
}

func (m *Manager) getLive(ctx context.Context) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return m.cfg.Client.GetNode(ctx, m.cfg.NodeName)
}

func (m *Manager) syncAnnotations(ctx context.Context, node *corev1.Node, want map[string]string) (*corev1.Node, error) {
	diff := map[string]string{}
	for k, v := range want {
		if cur, ok := node.Annotations[k]; !ok || cur != v {
			diff[k] = v
		}
	}
	if len(diff) == 0 {
		return node, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": diff}})
	if err != nil {
		return nil, fmt.Errorf("encoding annotation patch: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	out, err := m.cfg.Client.PatchNodeMetadata(pctx, m.cfg.NodeName, patch)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// transition is a status change that gets an Event once written.
type transition struct {
	cond Condition
	from Status
}

func (m *Manager) syncConditions(ctx context.Context, node *corev1.Node, desired map[ConditionType]Condition) error {
	var pending []transition
	var written *corev1.Node
	var basedOn string
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			n, err := m.getLive(ctx)
			if err != nil {
				return err
			}
			node = n
		}
		first = false
		patch, trans, err := m.conditionPatch(node, desired)
		if err != nil || patch == nil {
			pending = nil
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		out, err := m.cfg.Client.PatchNodeStatus(pctx, m.cfg.NodeName, patch)
		if err != nil {
			return err
		}
		pending, written, basedOn = trans, out, node.ResourceVersion
		return nil
	})
	if err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("patching node %s status: still conflicting after retries: %w", m.cfg.NodeName, err)
		}
		return err
	}
	if written != nil {
		m.lastWritten, m.lastWrittenFrom = written, basedOn
		m.emit(ctx, written, pending)
	}
	return nil
}

// conditionPatch computes the strategic-merge status patch that makes node
// show desired, or nil when nothing differs. The patch carries node's
// resourceVersion, so a concurrent change is a conflict, not a lost update.
func (m *Manager) conditionPatch(node *corev1.Node, desired map[ConditionType]Condition) ([]byte, []transition, error) {
	now := m.cfg.Clock.Now()
	existing := map[ConditionType]corev1.NodeCondition{}
	for _, c := range node.Status.Conditions {
		existing[ConditionType(c.Type)] = c
	}
	var entries []any
	var trans []transition
	beat := m.cfg.HeartbeatPeriod > 0 && m.heartbeatDue(existing, desired, now)
	for _, t := range AllConditionTypes() {
		want, isDesired := desired[t]
		cur, exists := existing[t]
		if !isDesired {
			if exists {
				entries = append(entries, map[string]any{"type": string(t), "$patch": "delete"})
			}
			continue
		}
		same := exists && Status(cur.Status) == want.Status && cur.Reason == want.Reason && cur.Message == want.Message
		if same && !beat {
			continue
		}
		want.LastTransitionTime = now
		if exists && Status(cur.Status) == want.Status && !cur.LastTransitionTime.IsZero() {
			want.LastTransitionTime = cur.LastTransitionTime.Time
		}
		entries = append(entries, ToNodeCondition(want, now))
		var from Status
		if exists {
			from = Status(cur.Status)
		}
		if from != want.Status {
			trans = append(trans, transition{cond: want, from: from})
		}
	}
	if len(entries) == 0 {
		return nil, nil, nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"status":   map[string]any{"conditions": entries},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("encoding condition patch: %w", err)
	}
	return patch, trans, nil
}

func (m *Manager) heartbeatDue(existing map[ConditionType]corev1.NodeCondition, desired map[ConditionType]Condition, now time.Time) bool {
	for t := range desired {
		c, ok := existing[t]
		if !ok || now.Sub(c.LastHeartbeatTime.Time) >= m.cfg.HeartbeatPeriod {
			return true
		}
	}
	return false
}

// emit records one Event per written transition: Warning into a problem,
// Normal out of one. Other transitions (e.g. to or from Unknown) get none.
func (m *Manager) emit(ctx context.Context, node *corev1.Node, trans []transition) {
	if m.cfg.Recorder == nil || len(trans) == 0 {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
	slices.SortFunc(trans, func(a, b transition) int { return compareTypes(a.cond.Type, b.cond.Type) })
	for _, tr := range trans {
		var eventType string
		switch {
		case tr.cond.Status == StatusTrue:
			eventType = corev1.EventTypeWarning
		case tr.from == StatusTrue && tr.cond.Status == StatusFalse:
			eventType = corev1.EventTypeNormal
		default:
			continue
		}
		klog.FromContext(ctx).V(2).Info("Condition changed", "node", node.Name, "condition", tr.cond.Type,
			"from", tr.from, "to", tr.cond.Status, "reason", tr.cond.Reason)
		m.cfg.Recorder.Eventf(ref, nil, eventType, tr.cond.Reason, string(tr.cond.Type), "%s", tr.cond.Message)
	}
}

func compareTypes(a, b ConditionType) int {
	all := AllConditionTypes()
	return slices.Index(all, a) - slices.Index(all, b)
}

// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// EventRecorder records events.k8s.io/v1 Events; the method is that of
// client-go's tools/events.EventRecorder, so its FakeRecorder serves tests.
type EventRecorder interface {
	// Eventf records an Event about regarding (a *corev1.ObjectReference)
	// with note formatted from args. It never blocks on the API server.
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// These follow client-go's tools/events.
const (
	// eventQueueLength bounds the Events waiting to be written; more are dropped.
	eventQueueLength = 1000
	// eventTries is how often an Event is tried while the API server is unreachable.
	eventTries = 12
	// seriesWindow is how long after an Event an isomorphic one (same type,
	// action, reason, object and reporter) counts into its series.
	seriesWindow = 6 * time.Minute
	// eventWriteTimeout bounds one write (create or patch): an API server
	// that accepts the request and never answers costs this, then the
	// write counts as a failed try.
	eventWriteTimeout = 10 * time.Second
)

// Recorder is an EventRecorder that writes through an EventInterface
// from Run, in order, as client-go's tools/events does: an Event into the
// Event's namespace (default for a cluster-scoped object), named
// <object>.<time>; an isomorphic Event within six minutes of the last
// one is counted into the first one's series with a patch (each occurrence
// is written at once, not batched); an Event the API server could not be
// reached for is tried again every ten seconds, twelve times.
//
// Each write is bounded (10 s): a wedged API server that accepts
// connections and never answers costs an Event at most its twelve tries
// (about four minutes), not every later Event forever. An Event given up on
// is dropped with an error log line "Dropped an Event" naming its reason,
// action and note; Events queued beyond 1000 are dropped with one too.
type Recorder struct {
	client       EventsGetter
	controller   string
	instance     string
	clock        clock.Clock
	retryAfter   time.Duration
	writeTimeout time.Duration
	queue        chan *eventsv1.Event
	// series is only touched by Run.
	series map[seriesKey]*eventsv1.Event
}

// EventsGetter returns the EventInterface of a namespace (Interface has it).
type EventsGetter interface {
	// Events writes Events in namespace.
	Events(namespace string) EventInterface
}

type seriesKey struct {
	eventType, action, reason, controller, instance string
	regarding, related                              corev1.ObjectReference
}

// NewRecorder returns a Recorder whose Events name controller as their
// reporting controller and controller-<hostname> as the instance. Nothing
// is written until Run runs.
func NewRecorder(client EventsGetter, controller string) *Recorder {
	hostname, _ := os.Hostname()
	return &Recorder{
		client: client, controller: controller, instance: controller + "-" + hostname,
		clock: clock.RealClock{}, retryAfter: 10 * time.Second, writeTimeout: eventWriteTimeout,
		queue: make(chan *eventsv1.Event, eventQueueLength), series: map[seriesKey]*eventsv1.Event{},
	}
}

// Eventf implements EventRecorder. regarding and related must be
// *corev1.ObjectReference (related may be nil).
func (r *Recorder) Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	logger := klog.Background()
	ref, ok := regarding.(*corev1.ObjectReference)
	if !ok || ref == nil {
		logger.Error(nil, "Cannot record an Event about this object: not an object reference", "objectType", fmt.Sprintf("%T", regarding), "reason", reason)
		return
	}
	var rel *corev1.ObjectReference
	if related != nil {
		rel, _ = related.(*corev1.ObjectReference)
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		logger.Error(nil, "Unsupported event type", "eventType", eventtype)
		return
	}
	now := r.clock.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: ns},
		EventTime:           metav1.MicroTime{Time: now},
		ReportingController: r.controller,
		ReportingInstance:   r.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             rel,
		Note:                fmt.Sprintf(note, args...),
		Type:                eventtype,
	}
	select {
	case r.queue <- ev:
	default:
		logger.Error(nil, "Dropped an Event: the queue of Events to write is full", "reason", reason, "action", action, "note", ev.Note)
	}
}

// Run writes queued Events until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.queue:
			r.record(ctx, ev)
		}
	}
}

// record writes ev, or counts it into the series of an isomorphic Event.
func (r *Recorder) record(ctx context.Context, ev *eventsv1.Event) {
	now := r.clock.Now()
	for k, e := range r.series { // forget series that ended
		last := e.EventTime.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		}
		if now.Sub(last) >= seriesWindow {
			delete(r.series, k)
		}
	}
	key := seriesKey{eventType: ev.Type, action: ev.Action, reason: ev.Reason, controller: ev.ReportingController,
		instance: ev.ReportingInstance, regarding: ev.Regarding}
	if ev.Related != nil {
		key.related = *ev.Related
	}
	first, isomorphic := r.series[key]
	if !isomorphic {
		r.series[key] = ev
		r.write(ctx, ev, false)
		return
	}
	if first.Series == nil {
		first.Series = &eventsv1.EventSeries{Count: 1}
	}
	first.Series.Count++
	first.Series.LastObservedTime = metav1.MicroTime{Time: now}
	r.write(ctx, first.DeepCopy(), true)
}

// write creates ev (or patches its series), trying again while the API
// server cannot be reached.
func (r *Recorder) write(ctx context.Context, ev *eventsv1.Event, series bool) {
	logger := klog.FromContext(ctx)
	for try := 1; ; try++ {
		err := r.writeOnce(ctx, ev, series)
		if err == nil {
			return
		}
		var status apierrors.APIStatus
		if errors.As(err, &status) || try >= eventTries {
			logger.Error(err, "Dropped an Event: could not write it", "reason", ev.Reason, "action", ev.Action, "note", ev.Note, "tries", try)
			return
		}
		logger.V(2).Info("Could not write Event (will try again)", "reason", ev.Reason, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(wait.Jitter(r.retryAfter, 0.25)):
		}
	}
}

// writeOnce makes one write of ev, bounded by writeTimeout.
func (r *Recorder) writeOnce(ctx context.Context, ev *eventsv1.Event, series bool) error {
	ctx, cancel := context.WithTimeout(ctx, r.writeTimeout)
	defer cancel()
	events := r.client.Events(ev.Namespace)
	if series {
		patch, err := json.Marshal(map[string]any{"series": ev.Series})
		if err != nil {
			return fmt.Errorf("encoding the series of Event %s: %w", ev.Name, err)
		}
		_, err = events.Patch(ctx, ev.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsNotFound(err) {
			if err != nil {
				return fmt.Errorf("patching Event %s: %w", ev.Name, err)
			}
			return nil
		}
		// The first Event is gone (expired): create it again, with its series.
	}
	ev.ResourceVersion = ""
	if _, err := events.Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Event %s: %w", ev.Name, err)
	}
	return nil
}

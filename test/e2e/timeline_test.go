// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ownedConditions are the Node condition types ipvs-guard publishes (docs/design.md §4).
var ownedConditions = []string{"IPVSModulesMissing", "KubeProxyIPVSDegraded", "KubeProxyDataplaneDegraded", "StrictARPDisabled", "LoadBalancerARPFailing"}

// timeline prints what happens, as it happens, with the time since the
// start: the test's steps, and every change of ipvs-guard's Node conditions
// and every Event it emits, as seen on the API server.
type timeline struct {
	start time.Time

	// mu guards w and conds.
	mu    sync.Mutex
	w     io.Writer
	conds map[string]corev1.NodeCondition
}

func newTimeline(w io.Writer) *timeline {
	return &timeline{start: time.Now(), w: w, conds: map[string]corev1.NodeCondition{}}
}

func (tl *timeline) since() string {
	return fmt.Sprintf("%6.1fs", time.Since(tl.start).Seconds())
}

// say prints a step of the story.
func (tl *timeline) say(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, "%s  %s\n", tl.since(), fmt.Sprintf(format, args...))
}

// detail prints an indented continuation line.
func (tl *timeline) detail(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(fmt.Sprintf(format, args...), "\n"), "\n") {
		fmt.Fprintf(tl.w, "%s     %s\n", strings.Repeat(" ", 7), l)
	}
}

// heading prints a scenario title.
func (tl *timeline) heading(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, "\n%s  ## %s\n", tl.since(), fmt.Sprintf(format, args...))
}

func (tl *timeline) nodeChanged(n *corev1.Node) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, c := range n.Status.Conditions {
		t := string(c.Type)
		if !isOwned(t) {
			continue
		}
		old, seen := tl.conds[t]
		tl.conds[t] = c
		// A new message under the same status and reason (a count, a
		// version) is not news for the story.
		if seen && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		fmt.Fprintf(tl.w, "%s  Node %s: condition %s=%s (%s)\n", tl.since(), n.Name, t, c.Status, c.Reason)
		if c.Message != "" {
			fmt.Fprintf(tl.w, "%s       %q\n", strings.Repeat(" ", 7), c.Message)
		}
	}
}

func (tl *timeline) eventAdded(e *eventsv1.Event) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if e.ReportingController != "ipvs-guard" {
		// Other components' warnings (kube-proxy's IPVS deprecation) are
		// part of the story too; their routine Normal Events are not.
		if e.Type == "Warning" {
			fmt.Fprintf(tl.w, "%s  Event %s %s from %s: %s\n", tl.since(), e.Type, e.Reason, e.ReportingController, e.Note)
		}
		return
	}
	fmt.Fprintf(tl.w, "%s  Event %s %s on %s %s (action %s)\n", tl.since(), e.Type, e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Action)
	if c, ok := tl.conds[e.Action]; ok && c.Message == e.Note {
		return // the condition's message, printed just above
	}
	if e.Note != "" {
		fmt.Fprintf(tl.w, "%s       %q\n", strings.Repeat(" ", 7), e.Note)
	}
}

func isOwned(t string) bool {
	for _, o := range ownedConditions {
		if o == t {
			return true
		}
	}
	return false
}

// watch feeds the timeline from informers on the node and on Events until
// ctx is done.
func (tl *timeline) watch(ctx context.Context, cs kubernetes.Interface, node string) {
	nf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	_, _ = nf.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tl.nodeChanged(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { tl.nodeChanged(obj.(*corev1.Node)) },
	})
	ef := informers.NewSharedInformerFactory(cs, 0)
	_, _ = ef.Events().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { tl.eventAdded(obj.(*eventsv1.Event)) },
	})
	nf.Start(ctx.Done())
	ef.Start(ctx.Done())
	nf.WaitForCacheSync(ctx.Done())
	ef.WaitForCacheSync(ctx.Done())
}

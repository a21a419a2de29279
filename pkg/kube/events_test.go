// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeEvents serves EventsGetter from client-go's fake clientset (its
// object tracker applies strategic-merge patches as the API server does).
type fakeEvents struct{ cs *fake.Clientset }

func (f fakeEvents) Events(ns string) EventInterface { return f.cs.EventsV1().Events(ns) }

func TestRecorderSeries(t *testing.T) {
	node := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-a", UID: types.UID("uid-a")}
	type record struct {
		after  time.Duration // since the previous record
		typ    string
		reason string
		note   string
	}
	tests := []struct {
		name    string
		records []record
		// want is, per Event object, its type, reason and series count
		// (1 for an Event without a series).
		want []string
	}{
		{name: "one", records: []record{{0, corev1.EventTypeWarning, "ModulesNotLoaded", "ip_vs_sh is not loaded"}},
			want: []string{"Warning ModulesNotLoaded 1"}},
		{name: "transition out and back in within six minutes", records: []record{
			{0, corev1.EventTypeWarning, "ModulesNotLoaded", "ip_vs_sh is not loaded"},
			{time.Minute, corev1.EventTypeNormal, "ModulesLoaded", "all loaded"},
			{time.Minute, corev1.EventTypeWarning, "ModulesNotLoaded", "ip_vs_rr is not loaded"},
			{time.Minute, corev1.EventTypeWarning, "ModulesNotLoaded", "ip_vs is not loaded"},
		}, want: []string{"Normal ModulesLoaded 1", "Warning ModulesNotLoaded 3"}},
		{name: "isomorphic after the series ended", records: []record{
			{0, corev1.EventTypeWarning, "ModulesNotLoaded", "x"},
			{7 * time.Minute, corev1.EventTypeWarning, "ModulesNotLoaded", "x"},
		}, want: []string{"Warning ModulesNotLoaded 1", "Warning ModulesNotLoaded 1"}},
		{name: "a series stays open while it is observed", records: []record{
			{0, corev1.EventTypeWarning, "ModulesNotLoaded", "x"},
			{5 * time.Minute, corev1.EventTypeWarning, "ModulesNotLoaded", "x"},
			{5 * time.Minute, corev1.EventTypeWarning, "ModulesNotLoaded", "x"},
		}, want: []string{"Warning ModulesNotLoaded 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
			r := NewRecorder(fakeEvents{cs}, "ipvs-guard")
			r.clock = clk
			ctx := context.Background()
			for _, rec := range tt.records {
				clk.Step(rec.after)
				r.Eventf(node, nil, rec.typ, rec.reason, "IPVSModulesMissing", "%s", rec.note)
				r.record(ctx, <-r.queue)
			}
			list, err := cs.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range list.Items {
				n := int32(1)
				if ev.Series != nil {
					n = ev.Series.Count
				}
				got = append(got, ev.Type+" "+ev.Reason+" "+strconv.Itoa(int(n)))
				checkEvent(t, &ev, node)
			}
			slices.Sort(got)
			if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Errorf("Events = %q, want %q", got, tt.want)
			}
		})
	}
}

func checkEvent(t *testing.T, ev *eventsv1.Event, node *corev1.ObjectReference) {
	t.Helper()
	if ev.Regarding != *node || ev.ReportingController != "ipvs-guard" || !strings.HasPrefix(ev.ReportingInstance, "ipvs-guard-") ||
		ev.Action != "IPVSModulesMissing" || !strings.HasPrefix(ev.Name, "node-a.") || ev.EventTime.IsZero() {
		t.Errorf("Event %+v: want it about node-a, action IPVSModulesMissing, reported by ipvs-guard", ev)
	}
}

func TestRecorderDropsWhatItCannotRecord(t *testing.T) {
	cs := fake.NewClientset()
	r := NewRecorder(fakeEvents{cs}, "ipvs-guard")
	r.Eventf(&corev1.Node{}, nil, corev1.EventTypeWarning, "R", "A", "not a reference")
	r.Eventf(&corev1.ObjectReference{Name: "n"}, nil, "Fatal", "R", "A", "no such type")
	if len(r.queue) != 0 {
		t.Errorf("%d Events queued, want none", len(r.queue))
	}
	for range eventQueueLength + 5 { // a full queue drops, never blocks
		r.Eventf(&corev1.ObjectReference{Name: "n"}, nil, corev1.EventTypeNormal, "R", "A", "x")
	}
	if len(r.queue) != eventQueueLength {
		t.Errorf("%d Events queued, want %d", len(r.queue), eventQueueLength)
	}
}

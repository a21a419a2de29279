// SPDX-License-Identifier: Apache-2.0

package nodestatus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus/nodestatustest"
)

func TestRemove(t *testing.T) {
	const mine = "ipvs-guard.io/macs"
	cond := func(t string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeConditionType(t), Status: corev1.ConditionFalse, Reason: "R"}
	}
	tests := []struct {
		name          string
		conditions    []corev1.NodeCondition
		annotations   map[string]string
		wantTypes     []corev1.NodeConditionType
		wantAnns      map[string]string
		wantWrote     bool
		wantStatus    int
		wantMetadata  int
		injectErr     error
		wantErrString string
	}{
		{
			name:         "all five conditions and the annotation go, others stay",
			conditions:   []corev1.NodeCondition{cond("Ready"), cond("IPVSModulesMissing"), cond("KubeProxyIPVSDegraded"), cond("KubeProxyDataplaneDegraded"), cond("StrictARPDisabled"), cond("LoadBalancerARPFailing"), cond("MemoryPressure")},
			annotations:  map[string]string{mine: "eth0=aa:bb:cc:dd:ee:ff", "other.io/x": "y"},
			wantTypes:    []corev1.NodeConditionType{"Ready", "MemoryPressure"},
			wantAnns:     map[string]string{"other.io/x": "y"},
			wantWrote:    true,
			wantStatus:   1,
			wantMetadata: 1,
		},
		{
			name:        "nothing of ours: no request",
			conditions:  []corev1.NodeCondition{cond("Ready")},
			annotations: map[string]string{"other.io/x": "y"},
			wantTypes:   []corev1.NodeConditionType{"Ready"},
			wantAnns:    map[string]string{"other.io/x": "y"},
		},
		{
			name:       "conditions only: no metadata patch",
			conditions: []corev1.NodeCondition{cond("Ready"), cond("StrictARPDisabled")},
			wantTypes:  []corev1.NodeConditionType{"Ready"},
			wantWrote:  true,
			wantStatus: 1,
		},
		{
			name:         "annotation only: no status patch",
			conditions:   []corev1.NodeCondition{cond("Ready")},
			annotations:  map[string]string{mine: "x"},
			wantTypes:    []corev1.NodeConditionType{"Ready"},
			wantAnns:     map[string]string{},
			wantWrote:    true,
			wantMetadata: 1,
		},
		{
			name:          "a failed patch is returned, nothing reported written",
			conditions:    []corev1.NodeCondition{cond("IPVSModulesMissing")},
			wantTypes:     []corev1.NodeConditionType{"IPVSModulesMissing"},
			wantStatus:    1,
			injectErr:     errors.New("forbidden"),
			wantErrString: "forbidden",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: tt.annotations}, Status: corev1.NodeStatus{Conditions: tt.conditions}}
			fc := nodestatustest.NewFakeClient(node)
			if tt.injectErr != nil {
				fc.InjectErrors(tt.injectErr)
			}
			wrote, err := nodestatus.Remove(context.Background(), fc, node, []string{mine})
			if tt.wantErrString != "" {
				if err == nil || err.Error() != tt.wantErrString {
					t.Fatalf("err = %v, want %q", err, tt.wantErrString)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if wrote != tt.wantWrote {
				t.Errorf("wrote = %v, want %v", wrote, tt.wantWrote)
			}
			got := fc.Node()
			var types []corev1.NodeConditionType
			for _, c := range got.Status.Conditions {
				types = append(types, c.Type)
			}
			if diff := cmp.Diff(tt.wantTypes, types); diff != "" {
				t.Errorf("condition types left (-want +got):\n%s", diff)
			}
			if len(tt.wantAnns)+len(got.Annotations) > 0 {
				if diff := cmp.Diff(tt.wantAnns, got.Annotations); diff != "" {
					t.Errorf("annotations left (-want +got):\n%s", diff)
				}
			}
			if n := len(fc.StatusPatches()); n != tt.wantStatus {
				t.Errorf("%d status patches, want %d", n, tt.wantStatus)
			}
			if n := len(fc.MetadataPatches()); n != tt.wantMetadata {
				t.Errorf("%d metadata patches, want %d", n, tt.wantMetadata)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestFindingState checks the metrics state a module finding publishes.
func TestFindingState(t *testing.T) {
	tests := []struct {
		name string
		f    Finding
		want check.ModuleState
	}{
		{"loaded and declared", Finding{Module: "ip_vs", Loaded: true, Available: true, Declared: true, DeclaredIn: []string{"/etc/modules-load.d/ipvs.conf"}},
			check.ModuleState{Module: "ip_vs", Loaded: true, Available: true, Declared: true}},
		{"built in counts as loaded and available", Finding{Module: "nf_conntrack", Builtin: true},
			check.ModuleState{Module: "nf_conntrack", Loaded: true, Available: true}},
		{"missing", Finding{Module: "ip_vs_lc", Available: true}, check.ModuleState{Module: "ip_vs_lc", Available: true}},
		{"stale", Finding{Module: "nf_conntrack_ipv4", Declared: true, Stale: true}, check.ModuleState{Module: "nf_conntrack_ipv4", Declared: true, Stale: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(check.State{Module: &tt.want}, tt.f.State()); diff != "" {
				t.Errorf("State() (-want +got):\n%s", diff)
			}
		})
	}
}

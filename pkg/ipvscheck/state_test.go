// SPDX-License-Identifier: Apache-2.0

package ipvscheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestFindingState checks the metrics state the ipvs findings publish.
func TestFindingState(t *testing.T) {
	two := 2
	tests := []struct {
		name string
		f    check.Finding
		want check.State
	}{
		{"summary with a kubeconfig", Summary{VirtualServers: 7, RealServers: 9, VirtualServersWithoutRealServers: &two, Scheduler: "rr"},
			check.State{IPVSTable: &check.IPVSTableState{VirtualServers: 7, WithoutRealServers: &two}}},
		{"summary without a kubeconfig", Summary{VirtualServers: 3}, check.State{IPVSTable: &check.IPVSTableState{VirtualServers: 3}}},
		{"one virtual server publishes nothing", Finding{VIP: "10.43.0.1", Port: 443, Protocol: "TCP", Problem: ProblemMissing}, check.State{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.f.State()); diff != "" {
				t.Errorf("State() (-want +got):\n%s", diff)
			}
		})
	}
}

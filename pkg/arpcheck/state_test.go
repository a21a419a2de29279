// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestFindingState checks the metrics state an ARP finding publishes.
func TestFindingState(t *testing.T) {
	tests := []struct {
		name string
		f    Finding
		want check.State
	}{
		{"answered", Finding{IP: "192.0.2.10", Interface: "eth0", Result: ResultAnswered, MACs: []string{"02:00:00:00:00:01"}, RTTSeconds: 0.001, Service: "default/web"},
			check.State{ARP: &check.ARPState{IP: "192.0.2.10", Family: "ipv4", Interface: "eth0", Result: "answered", Responders: 1, RTTSeconds: 0.001, Service: "default/web"}}},
		{"conflict counts every responder", Finding{IP: "192.0.2.11", Interface: "eth0", Result: ResultConflict, MACs: []string{"02:00:00:00:00:01", "02:00:00:00:00:02"}, RTTSeconds: 0.002},
			check.State{ARP: &check.ARPState{IP: "192.0.2.11", Family: "ipv4", Interface: "eth0", Result: "conflict", Responders: 2, RTTSeconds: 0.002}}},
		{"no reply", Finding{IP: "192.0.2.12", Interface: "eth0", Result: ResultNoReply, MACs: []string{}},
			check.State{ARP: &check.ARPState{IP: "192.0.2.12", Family: "ipv4", Interface: "eth0", Result: "no-reply"}}},
		{"wrong responder", Finding{IP: "192.0.2.13", Interface: "eth1", Result: ResultWrongResponder, MACs: []string{"02:00:00:00:00:03"}, RTTSeconds: 0.003},
			check.State{ARP: &check.ARPState{IP: "192.0.2.13", Family: "ipv4", Interface: "eth1", Result: "wrong-responder", Responders: 1, RTTSeconds: 0.003}}},
		{"IPv6 carries its family", Finding{IP: "2001:db8::10", Family: FamilyIPv6, Interface: "eth0", Result: ResultAnswered, MACs: []string{"02:00:00:00:00:01"}, RTTSeconds: 0.001},
			check.State{ARP: &check.ARPState{IP: "2001:db8::10", Family: "ipv6", Interface: "eth0", Result: "answered", Responders: 1, RTTSeconds: 0.001}}},
		{"no verdict publishes nothing", Finding{IP: "192.0.2.14", Interface: "eth0", Result: ResultUnknown}, check.State{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.f.State()); diff != "" {
				t.Errorf("State() (-want +got):\n%s", diff)
			}
		})
	}
}

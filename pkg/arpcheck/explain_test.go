// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"context"
	"net"
	"testing"
)

// TestFindingAsksExplainOnlyWhenUnanswered checks that a target's Explain
// (which may read the API) is asked only once a probe found the IP
// unanswered, and that its cause and message land in the finding.
func TestFindingAsksExplainOnlyWhenUnanswered(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:00:00:0a")
	tests := []struct {
		name      string
		obs       Observation
		wantAsked bool
		wantCause string
		wantMsg   string
	}{
		{name: "no reply", obs: Observation{Requests: 1}, wantAsked: true, wantCause: "NoL2Advertisement", wantMsg: "pool p is selected by no L2Advertisement"},
		{name: "answered", obs: Observation{Requests: 1, MACs: []net.HardwareAddr{mac}}},
		{name: "conflict", obs: Observation{Requests: 1, MACs: []net.HardwareAddr{mac, {0x52, 0x54, 0, 0, 0, 0x0b}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker(CheckerOptions{Targets: StaticTargets()})
			if err != nil {
				t.Fatal(err)
			}
			asked := false
			tg := Target{IP: ip("10.0.0.9"), Service: "default/web", Unannounced: "before",
				Explain: func(context.Context) (string, string) {
					asked = true
					return "NoL2Advertisement", "pool p is selected by no L2Advertisement"
				}}
			f := c.finding(context.Background(), tg, "eth0", tt.obs)
			if asked != tt.wantAsked {
				t.Errorf("Explain asked: %v, want %v", asked, tt.wantAsked)
			}
			if f.Cause != tt.wantCause {
				t.Errorf("Cause = %q, want %q", f.Cause, tt.wantCause)
			}
			if tt.wantMsg != "" && f.Unannounced != tt.wantMsg {
				t.Errorf("Unannounced = %q, want %q", f.Unannounced, tt.wantMsg)
			}
			if st := f.State().ARP; st == nil || st.Cause != tt.wantCause {
				t.Errorf("State().ARP = %+v, want cause %q", st, tt.wantCause)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestFindingState checks the metrics state a kube-proxy finding publishes.
func TestFindingState(t *testing.T) {
	on, off := true, false
	tests := []struct {
		name string
		f    Finding
		want check.KubeProxyState
	}{
		{"ipvs with strict ARP", Finding{Mode: "ipvs", StrictARP: &on, KubeIPVS0: true}, check.KubeProxyState{Mode: "ipvs", StrictARP: &on}},
		{"strict ARP off", Finding{Mode: "ipvs", StrictARP: &off}, check.KubeProxyState{Mode: "ipvs", StrictARP: &off}},
		{"strict ARP unknown", Finding{Mode: "iptables"}, check.KubeProxyState{Mode: "iptables"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(check.State{KubeProxy: &tt.want}, tt.f.State()); diff != "" {
				t.Errorf("State() (-want +got):\n%s", diff)
			}
		})
	}
}

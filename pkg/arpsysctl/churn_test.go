// SPDX-License-Identifier: Apache-2.0

package arpsysctl

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// TestMessageIgnoresServiceChurn: every node holds every LoadBalancer IP on
// kube-ipvs0, so neither the healthy nor the problem message may depend on
// them: one new Service would otherwise rewrite the condition on every Node.
func TestMessageIgnoresServiceChurn(t *testing.T) {
	tests := []struct {
		name   string
		all    Values
		want   check.Status
		ifaces map[string]iface
	}{
		{name: "strict ARP", all: Values{1, 2}, want: check.StatusOK, ifaces: map[string]iface{"eth0": {0, 0, 1, ""}}},
		{name: "arp_ignore 0", all: Values{0, 0}, want: check.StatusProblem, ifaces: map[string]iface{"eth0": {0, 0, 1, "0x1003"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := hostTree(t, tc.all, tc.ifaces)
			var msgs []string
			for _, n := range []int{1, 2, 300} {
				msgs = append(msgs, runWithLBIPs(t, root, n, tc.want))
			}
			for _, m := range msgs[1:] {
				if diff := cmp.Diff(msgs[0], m); diff != "" {
					t.Errorf("message changes with the LoadBalancer IP count (-1 IP +more):\n%s", diff)
				}
			}
		})
	}
}

func runWithLBIPs(t *testing.T, root hostfs.Root, n int, want check.Status) string {
	t.Helper()
	var lbs []netip.Addr
	addrs := []string{"10.96.0.1"}
	for i := range n {
		a := netip.AddrFrom4([4]byte{192, 0, byte(2 + i/250), byte(i%250 + 1)})
		lbs = append(lbs, a)
		addrs = append(addrs, a.String())
	}
	c, err := NewChecker(Config{Root: root, ReadLink: link(addrs...), Distro: distro.Kubeadm,
		LoadBalancerIPs: func(context.Context) ([]netip.Addr, error) { return lbs, nil }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != want {
		t.Fatalf("%d IPs: %s/%s %s", n, res.Status, res.Reason, res.Message)
	}
	return fmt.Sprint(res.Reason, ": ", res.Message)
}

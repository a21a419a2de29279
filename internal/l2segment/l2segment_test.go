// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package l2segment

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// TestKubeIPVS0StandIn checks the stand-in for kube-proxy's dummy: an
// address on the down ifb kube-ipvs0 is answered by the node's kernel on
// eth0 with arp_ignore=0 and not with strictARP's arp_ignore=1.
func TestKubeIPVS0StandIn(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, Check() == nil, "ip and arping needed")
	ctx := context.Background()
	seg, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(seg.Close)
	a, err := seg.AddNode(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := seg.AddNode(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	a4 := seg.Subnet.Addr().As4()
	a4[3] = 250
	vip := netip.AddrFrom4(a4)
	if err := b.AddVIP(ctx, vip); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		strict bool
		want   []string
	}{
		{strict: true, want: nil},
		{strict: false, want: []string{b.MAC}},
	} {
		if err := b.SetStrictARP(ctx, tc.strict); err != nil {
			t.Fatal(err)
		}
		r, err := a.Arping(ctx, vip, 2, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, r.MACs); diff != "" {
			t.Errorf("strictARP=%v: responders (-want +got):\n%s\n%s", tc.strict, diff, r.Output)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build guest

package arpcheck_test

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/guestmodules"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
)

func ip(t *testing.T, args ...string) {
	t.Helper()
	if r := guest.Run(t, "/usr/sbin/ip", args...); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
}

// TestGuestVIPsOnKubeIPVS0 measures, on the stock Debian kernel with a real
// dummy kube-ipvs0 (as kube-proxy makes it), whether the node answers address
// resolution for the dual-stack VIPs on it when asked on its LAN interface:
// the IPv4 VIP is answered under arp_ignore=0 and not under arp_ignore=1
// (strict ARP); the IPv6 VIP is never answered, whatever arp_ignore,
// forwarding or the device's state. The prober is a network namespace on
// the other end of a veth.
func TestGuestVIPsOnKubeIPVS0(t *testing.T) {
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	t.Cleanup(func() {
		guest.Run(t, "/usr/sbin/ip", "link", "del", "kube-ipvs0")
		guest.Run(t, "/usr/sbin/ip", "link", "del", "ig-veth0")
		guest.Run(t, "/usr/sbin/ip", "netns", "del", "igprober")
		guest.ResetModules(t)
	})
	guestmodules.LoadNative(t, "dummy", "veth")
	ip(t, "netns", "add", "igprober")
	nsPath := "/run/netns/igprober" // iproute2's NETNS_RUN_DIR, /var/run/netns on older builds
	if _, err := os.Stat(nsPath); err != nil {
		nsPath = "/var/run/netns/igprober"
	}
	ip(t, "link", "add", "kube-ipvs0", "type", "dummy")
	ip(t, "addr", "add", "198.51.100.10/32", "dev", "kube-ipvs0")
	ip(t, "addr", "add", "fd00:99::10/128", "dev", "kube-ipvs0", "nodad")
	ip(t, "link", "add", "ig-veth0", "type", "veth", "peer", "name", "ig-veth1", "netns", "igprober")
	ip(t, "addr", "add", "198.51.100.1/24", "dev", "ig-veth0")
	ip(t, "addr", "add", "fd00:99::1/64", "dev", "ig-veth0", "nodad")
	ip(t, "link", "set", "ig-veth0", "up")
	ip(t, "-n", "igprober", "addr", "add", "198.51.100.2/24", "dev", "ig-veth1")
	ip(t, "-n", "igprober", "addr", "add", "fd00:99::2/64", "dev", "ig-veth1", "nodad")
	ip(t, "-n", "igprober", "link", "set", "ig-veth1", "up")
	ip(t, "-n", "igprober", "link", "set", "lo", "up")

	probe := func(t *testing.T, vip string) arpcheck.Finding {
		t.Helper()
		c, err := arpcheck.NewChecker(arpcheck.CheckerOptions{
			Targets: arpcheck.StaticTargets(arpcheck.Target{IP: mustAddr(t, vip)}),
			Network: arpcheck.HostNetwork{NetNSPath: nsPath},
			Probe:   arpcheck.ProbeOptions{Window: 500 * time.Millisecond, Attempts: 3},
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatalf("probing %s: %v", vip, err)
		}
		t.Logf("%s: %s", vip, res.Message)
		return res.Findings[0].(arpcheck.Finding)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T)
		vip   string
		want  arpcheck.Result
	}{
		{"IPv4 VIP, arp_ignore=0", func(t *testing.T) { guest.SetSysctl(t, "net.ipv4.conf.all.arp_ignore", "0") }, "198.51.100.10", arpcheck.ResultAnswered},
		{"IPv4 VIP, arp_ignore=1", func(t *testing.T) { guest.SetSysctl(t, "net.ipv4.conf.all.arp_ignore", "1") }, "198.51.100.10", arpcheck.ResultNoReply},
		{"IPv6 VIP, arp_ignore=0", func(t *testing.T) { guest.SetSysctl(t, "net.ipv4.conf.all.arp_ignore", "0") }, "fd00:99::10", arpcheck.ResultNoReply},
		{"IPv6 VIP, forwarding on, kube-ipvs0 up", func(t *testing.T) {
			guest.SetSysctl(t, "net.ipv6.conf.all.forwarding", "1")
			ip(t, "link", "set", "kube-ipvs0", "up")
			t.Cleanup(func() { guest.Run(t, "/usr/sbin/ip", "link", "set", "kube-ipvs0", "down") })
		}, "fd00:99::10", arpcheck.ResultNoReply},
		{"IPv6 address on the LAN interface", nil, "fd00:99::1", arpcheck.ResultAnswered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			f := probe(t, tc.vip)
			if f.Result != tc.want || f.Interface != "ig-veth1" {
				t.Errorf("%s on %s: %s by %v, want %s", tc.vip, f.Interface, f.Result, f.MACs, tc.want)
			}
		})
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

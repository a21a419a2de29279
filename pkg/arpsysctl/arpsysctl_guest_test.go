// SPDX-License-Identifier: Apache-2.0

//go:build guest

package arpsysctl_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/guestmodules"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpsysctl"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

func sh(t *testing.T, cmd string) {
	t.Helper()
	if r := guest.Run(t, "sh", "-c", cmd); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
}

// TestGuestLoadBalancerIPOnKubeIPVS0 puts a LoadBalancer IP on a real
// kube-ipvs0 next to an ARP-capable veth and checks the real sysctls: with
// arp_ignore=0 the node would answer ARP for it (flagged), with
// arp_ignore=1 arp_announce=2 it would not (ok); in process and through the
// binary (no kubeconfig: every kube-ipvs0 address counts).
func TestGuestLoadBalancerIPOnKubeIPVS0(t *testing.T) {
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	t.Cleanup(func() {
		guest.Run(t, "/usr/sbin/ip", "link", "del", "kube-ipvs0")
		guest.Run(t, "/usr/sbin/ip", "link", "del", "ig-veth0")
		guest.ResetModules(t)
	})
	// ip loads dummy and veth through the kernel's rtnl-link autoload only if
	// the modprobe helper were on; it is off, so load them natively first.
	if r := guest.IPVSGuard(t, "version"); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	guestmodules.LoadNative(t, "dummy", "veth")
	sh(t, "/usr/sbin/ip link add kube-ipvs0 type dummy && /usr/sbin/ip addr add 192.0.2.10/32 dev kube-ipvs0")
	sh(t, "/usr/sbin/ip link add ig-veth0 type veth peer name ig-veth1 && /usr/sbin/ip link set ig-veth0 up && /usr/sbin/ip link set ig-veth1 up")

	lb := func(context.Context) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.10")}, nil
	}
	c, err := arpsysctl.NewChecker(arpsysctl.Config{Root: hostfs.New("/"), ReadLink: kubeproxy.ReadLink, LoadBalancerIPs: lb})
	if err != nil {
		t.Fatal(err)
	}
	diagnose := func() (status, reason string) {
		r := guest.IPVSGuard(t, "diagnose", "-o", "json", "--node-name", "guest")
		var rep struct {
			Raw []struct {
				Name, Status, Reason, Message string
			} `json:"checks"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		for _, c := range rep.Raw {
			if c.Name == check.NameARPSysctls {
				t.Logf("diagnose arp-sysctls: %s/%s: %s", c.Status, c.Reason, c.Message)
				return c.Status, c.Reason
			}
		}
		t.Fatalf("no arp-sysctls check in:\n%s", r)
		return "", ""
	}

	for _, tc := range []struct {
		ignore, announce string
		wantStatus       check.Status
		wantReason       string
	}{
		{"0", "0", check.StatusProblem, arpsysctl.ReasonArpIgnoreTooLow},
		{"1", "2", check.StatusOK, arpsysctl.ReasonOK},
		{"1", "0", check.StatusProblem, arpsysctl.ReasonArpAnnounceWrong},
	} {
		guest.SetSysctl(t, "net.ipv4.conf.all.arp_ignore", tc.ignore)
		guest.SetSysctl(t, "net.ipv4.conf.all.arp_announce", tc.announce)
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("arp_ignore=%s arp_announce=%s: %s/%s: %s", tc.ignore, tc.announce, res.Status, res.Reason, res.Message)
		if res.Status != tc.wantStatus || res.Reason != tc.wantReason {
			t.Errorf("arp_ignore=%s arp_announce=%s: got %s/%s, want %s/%s", tc.ignore, tc.announce, res.Status, res.Reason, tc.wantStatus, tc.wantReason)
		}
		// The message names the sysctl, never the IPs (every node holds them
		// all: a list would change on every node with every Service).
		if res.Status == check.StatusProblem && (!strings.Contains(res.Message, "net.ipv4.conf.all.arp_") || strings.Contains(res.Message, "192.0.2.10")) {
			t.Errorf("message does not name the sysctl, or lists the LoadBalancer IPs: %s", res.Message)
		}
		if st, rs := diagnose(); st != string(tc.wantStatus) || rs != tc.wantReason {
			t.Errorf("diagnose: got %s/%s, want %s/%s", st, rs, tc.wantStatus, tc.wantReason)
		}
	}
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("modprobe was executed: %q", calls)
	}
}

// SPDX-License-Identifier: Apache-2.0

package arpsysctl

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

type iface struct {
	ignore, announce int
	typ              int // 0 = no sysfs entry
	flags            string
}

// hostTree writes a /proc/sys/net/ipv4/conf (+ /sys/class/net) tree.
func hostTree(t *testing.T, all Values, ifaces map[string]iface) hostfs.Root {
	t.Helper()
	dir := t.TempDir()
	put := func(p string, v string) {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := "proc/sys/net/ipv4/conf/"
	put(conf+"all/arp_ignore", strconv.Itoa(all.ArpIgnore))
	put(conf+"all/arp_announce", strconv.Itoa(all.ArpAnnounce))
	put(conf+"default/arp_ignore", "0")
	put(conf+"default/arp_announce", "0")
	for n, v := range ifaces {
		put(conf+n+"/arp_ignore", strconv.Itoa(v.ignore))
		put(conf+n+"/arp_announce", strconv.Itoa(v.announce))
		if v.typ != 0 {
			put("sys/class/net/"+n+"/type", strconv.Itoa(v.typ))
		}
		if v.flags != "" {
			put("sys/class/net/"+n+"/flags", v.flags)
		}
	}
	return hostfs.New(dir)
}

func TestReadAndEvaluate(t *testing.T) {
	tests := []struct {
		name      string
		all       Values
		ifaces    map[string]iface
		wantBad   []string
		wantIface []string
	}{
		{
			name:      "defaults answer ARP for everything",
			all:       Values{0, 0},
			ifaces:    map[string]iface{"eth0": {0, 0, 1, "0x1003"}, "lo": {0, 0, 772, "0x9"}, "kube-ipvs0": {0, 0, 1, "0x82"}},
			wantBad:   []string{"net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce"},
			wantIface: []string{"eth0"},
		},
		{
			name:      "strict ARP on all (what kube-proxy sets)",
			all:       Values{1, 2},
			ifaces:    map[string]iface{"eth0": {0, 0, 1, "0x1003"}},
			wantIface: []string{"eth0"},
		},
		{
			name:      "per-interface strict is enough for that interface only",
			all:       Values{0, 0},
			ifaces:    map[string]iface{"eth0": {1, 2, 1, "0x1003"}, "eth1": {0, 0, 1, "0x1003"}},
			wantBad:   []string{"net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce"},
			wantIface: []string{"eth0", "eth1"},
		},
		{
			name:      "arp_ignore 3 on an interface wins over all=1 and still answers",
			all:       Values{1, 2},
			ifaces:    map[string]iface{"eth0": {3, 0, 1, ""}},
			wantBad:   []string{"net.ipv4.conf.eth0.arp_ignore"},
			wantIface: []string{"eth0"},
		},
		{
			name:      "an interface above an unsafe conf/all is named too",
			all:       Values{0, 0},
			ifaces:    map[string]iface{"eth0": {3, 0, 1, ""}},
			wantBad:   []string{"net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce", "net.ipv4.conf.eth0.arp_ignore"},
			wantIface: []string{"eth0"},
		},
		{
			name:      "arp_announce 3 behaves like 0",
			all:       Values{1, 3},
			ifaces:    map[string]iface{},
			wantBad:   []string{"net.ipv4.conf.all.arp_announce"},
			wantIface: []string{},
		},
		{
			name:      "arp_ignore 8 never replies",
			all:       Values{8, 2},
			ifaces:    map[string]iface{"eth0": {0, 0, 0, ""}},
			wantIface: []string{"eth0"},
		},
		{
			name:      "non-ether and NOARP interfaces are not judged",
			all:       Values{1, 2},
			ifaces:    map[string]iface{"tunl0": {0, 0, 768, "0x1"}, "dummy9": {0, 0, 1, "0x83"}},
			wantIface: []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := hostTree(t, tc.all, tc.ifaces)
			r, err := Read(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			gotIfaces := []string{}
			for n := range r.Interfaces {
				gotIfaces = append(gotIfaces, n)
			}
			if diff := cmp.Diff(tc.wantIface, gotIfaces, cmpSorted); diff != "" {
				t.Errorf("interfaces (-want +got)\n%s", diff)
			}
			var bad []string
			for _, f := range Unsafe(Evaluate(r)) {
				bad = append(bad, f.Sysctl)
			}
			if diff := cmp.Diff(tc.wantBad, bad, cmpSorted); diff != "" {
				t.Errorf("unsafe sysctls (-want +got)\n%s", diff)
			}
		})
	}
}

var cmpSorted = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string{}, in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
})

func link(addrs ...string) kubeproxy.LinkReader {
	return func(name string) (kubeproxy.Link, error) {
		l := kubeproxy.Link{Name: name, Exists: addrs != nil}
		for _, a := range addrs {
			l.Addrs = append(l.Addrs, netip.MustParseAddr(a))
		}
		return l, nil
	}
}

func TestChecker(t *testing.T) {
	lb := func(ips ...string) LoadBalancerIPs {
		return func(context.Context) ([]netip.Addr, error) {
			var out []netip.Addr
			for _, s := range ips {
				out = append(out, netip.MustParseAddr(s))
			}
			return out, nil
		}
	}
	unsafeRoot := func(t *testing.T) hostfs.Root {
		return hostTree(t, Values{0, 0}, map[string]iface{"eth0": {0, 0, 1, "0x1003"}})
	}
	tests := []struct {
		name       string
		root       func(t *testing.T) hostfs.Root
		link       kubeproxy.LinkReader
		lb         LoadBalancerIPs
		wantStatus check.Status
		wantReason string
		wantInMsg  []string
	}{
		{name: "no kube-ipvs0", root: unsafeRoot, link: link(), wantStatus: check.StatusSkipped, wantReason: ReasonNoLoadBalancerIPs},
		{name: "only ClusterIPs with a kubeconfig", root: unsafeRoot, link: link("10.96.0.1", "10.96.0.50"), lb: lb("192.0.2.10"), wantStatus: check.StatusSkipped, wantReason: ReasonNoLoadBalancerIPs},
		{name: "LB IP with arp_ignore 0", root: unsafeRoot, link: link("10.96.0.1", "192.0.2.10"), lb: lb("192.0.2.10"), wantStatus: check.StatusProblem, wantReason: ReasonArpIgnoreTooLow,
			wantInMsg: []string{"LoadBalancer IPs on kube-ipvs0", "net.ipv4.conf.all.arp_ignore=0"}},
		{name: "LB IP with strict ARP", root: func(t *testing.T) hostfs.Root {
			return hostTree(t, Values{1, 2}, map[string]iface{"eth0": {0, 0, 1, ""}})
		},
			link: link("192.0.2.10"), lb: lb("192.0.2.10"), wantStatus: check.StatusOK, wantReason: ReasonOK},
		{name: "announce only", root: func(t *testing.T) hostfs.Root { return hostTree(t, Values{1, 0}, nil) },
			link: link("192.0.2.10"), lb: lb("192.0.2.10"), wantStatus: check.StatusProblem, wantReason: ReasonArpAnnounceWrong},
		{name: "no kubeconfig: every kube-ipvs0 address counts", root: unsafeRoot, link: link("10.96.0.1"), wantStatus: check.StatusProblem, wantReason: ReasonArpIgnoreTooLow},
		{name: "IPv6 LB IPs only: nothing the kernel answers", root: unsafeRoot, link: link("fd00:96::1", "2001:db8::10"), lb: lb("2001:db8::10"), wantStatus: check.StatusSkipped, wantReason: ReasonNoLoadBalancerIPs,
			wantInMsg: []string{"no IPv4 LoadBalancer IPs", "IPv6 addresses left out"}},
		{name: "dual-stack LB IPs: only the IPv4 one is judged", root: unsafeRoot, link: link("192.0.2.10", "2001:db8::10"), lb: lb("192.0.2.10", "2001:db8::10"), wantStatus: check.StatusProblem, wantReason: ReasonArpIgnoreTooLow,
			wantInMsg: []string{"answers ARP for the LoadBalancer IPs on kube-ipvs0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChecker(Config{Root: tc.root(t), ReadLink: tc.link, LoadBalancerIPs: tc.lb, Distro: distro.RKE2})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.wantStatus || res.Reason != tc.wantReason {
				t.Fatalf("got %s/%s (%s), want %s/%s", res.Status, res.Reason, res.Message, tc.wantStatus, tc.wantReason)
			}
			for _, s := range tc.wantInMsg {
				if !strings.Contains(res.Message, s) {
					t.Errorf("message %q does not name %q", res.Message, s)
				}
			}
			if res.Status == check.StatusProblem {
				rem := check.JoinSteps(res.Remediation, "\n")
				for _, s := range []string{"ipvs-strict-arp=true", "kube-proxy-arg", "sysctl -w net.ipv4.conf.all.", SysctlFile} {
					if !strings.Contains(rem, s) {
						t.Errorf("remediation lacks %q:\n%s", s, rem)
					}
				}
			}
		})
	}
}

func TestRemediationPerInterface(t *testing.T) {
	bad := []Finding{
		{Sysctl: "net.ipv4.conf.eth0.arp_ignore", Interface: "eth0", Value: 3, Effective: 3},
		{Sysctl: "net.ipv4.conf.eth1.arp_ignore", Interface: "eth1", Value: 0, Effective: 0},
	}
	rem := check.JoinSteps(Remediation(distro.Kubeadm, bad), "\n")
	for _, s := range []string{"net.ipv4.conf.eth0.arp_ignore=1", "net.ipv4.conf.all.arp_ignore=1", "strictARP: true"} {
		if !strings.Contains(rem, s) {
			t.Errorf("remediation lacks %q:\n%s", s, rem)
		}
	}
	if strings.Contains(rem, "eth1") {
		t.Errorf("eth1 is fixed by conf/all, must not be named:\n%s", rem)
	}
}

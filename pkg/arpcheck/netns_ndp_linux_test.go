// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package arpcheck

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// ndisc6Result is what Debian's ndisc6 saw.
type ndisc6Result struct {
	exit int
	macs []string // distinct, sorted, lower case
	out  string
}

var ndiscReply = regexp.MustCompile(`(?m)^Target link-layer address: ([0-9A-Fa-f:]{17})\s*\n\s*from (\S+)`)

// ndisc6 runs `ndisc6 -m` in ns: it solicits ip on iface and prints every
// advertisement (-m) until its wait ends.
func ndisc6(t testing.TB, ns, iface, ip string, args ...string) ndisc6Result {
	t.Helper()
	full := append([]string{"netns", "exec", ns, "ndisc6", "-m", "-n"}, args...)
	full = append(full, ip, iface)
	out, err := exec.Command("ip", full...).CombinedOutput()
	res := ndisc6Result{out: string(out)}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running ndisc6: %v", err)
		}
		res.exit = ee.ExitCode()
	}
	for _, m := range ndiscReply.FindAllStringSubmatch(res.out, -1) {
		if m[2] != ip {
			t.Fatalf("ndisc6 printed an answer from %s while soliciting %s:\n%s", m[2], ip, res.out)
		}
		if mac := strings.ToLower(m[1]); !slices.Contains(res.macs, mac) {
			res.macs = append(res.macs, mac)
		}
	}
	slices.Sort(res.macs)
	return res
}

// ndisc6Verdict applies the package's classification to what ndisc6 saw.
func ndisc6Verdict(t testing.TB, r ndisc6Result, expected []string) Result {
	t.Helper()
	// ndisc6's own verdict: exit 0 when something answered, 2 when nothing did.
	if wantExit := map[bool]int{true: 0, false: 2}[len(r.macs) > 0]; r.exit != wantExit {
		t.Fatalf("ndisc6 exit %d with %d answering MACs, want %d:\n%s", r.exit, len(r.macs), wantExit, r.out)
	}
	var macs, exp = toMACs(t, r.macs), toMACs(t, expected)
	return classify(macs, exp)
}

func toMACs(t testing.TB, ss []string) []net.HardwareAddr {
	var out []net.HardwareAddr
	for _, s := range ss {
		out = append(out, mustMAC(t, s))
	}
	return out
}

// TestNetNSTopologyIPv6 is TestNetNSTopology on a dual-stack segment: every
// IPv6 verdict is checked against ndisc6 run from the prober's namespace,
// and so is the kernel's behaviour for IPv6 addresses on a kube-ipvs0-like
// device (observed: never answered from another interface, whatever
// arp_ignore, forwarding or the device's state say; the IPv4 address next
// to it is answered under arp_ignore=0).
func TestNetNSTopologyIPv6(t *testing.T) {
	requireNetNS(t)
	tp := newTopo(t)
	br := tp.ns("br")
	tp.bridge(br, "br0")
	prober := tp.ns("prober")
	n1, n2, n3 := tp.ns("node1"), tp.ns("node2"), tp.ns("node3")
	tp.plug(br, "br0", "p0", prober, "eth0", "10.77.0.1/24", "fd00:77::1/64")
	mac1 := tp.plug(br, "br0", "n1", n1, "eth0", "10.77.0.11/24", "fd00:77::11/64")
	mac2 := tp.plug(br, "br0", "n2", n2, "eth0", "10.77.0.12/24", "fd00:77::12/64")
	mac3 := tp.plug(br, "br0", "n3", n3, "eth0", "10.77.0.13/24", "fd00:77::13/64")
	// The same address on two nodes.
	tp.run("ip", "-n", n2, "addr", "add", "fd00:77::50/64", "dev", "eth0")
	tp.run("ip", "-n", n3, "addr", "add", "fd00:77::50/64", "dev", "eth0")
	// A dual-stack VIP on a dummy-like interface, as kube-proxy puts it on
	// kube-ipvs0, with the IPv4 side answering (arp_ignore=0).
	tp.vipDevice(n1, "kube-ipvs0")
	tp.run("ip", "-n", n1, "addr", "add", "10.77.0.60/32", "dev", "kube-ipvs0")
	tp.run("ip", "-n", n1, "addr", "add", "fd00:77::60/128", "dev", "kube-ipvs0")
	tp.sysctl(n1, "net.ipv4.conf.all.arp_ignore", "0")

	sorted := func(m ...string) []string { s := slices.Clone(m); slices.Sort(s); return s }
	cases := []struct {
		name     string
		ip       string
		expected []string
		want     Result
		wantMACs []string
		setup    func()
	}{
		{name: "owned address answers", ip: "fd00:77::11", want: ResultAnswered, wantMACs: []string{mac1}},
		{name: "unused address gets no reply", ip: "fd00:77::99", want: ResultNoReply, wantMACs: []string{}},
		{name: "address on two nodes conflicts", ip: "fd00:77::50", want: ResultConflict, wantMACs: sorted(mac2, mac3)},
		{name: "expected MAC differs", ip: "fd00:77::12", expected: []string{mac3}, want: ResultWrongResponder, wantMACs: []string{mac2}},
		{name: "expected MAC matches", ip: "fd00:77::13", expected: []string{mac3}, want: ResultAnswered, wantMACs: []string{mac3}},
		{name: "IPv4 VIP on kube-ipvs0 with arp_ignore=0 answers", ip: "10.77.0.60", want: ResultAnswered, wantMACs: []string{mac1}},
		{name: "IPv6 VIP on kube-ipvs0 gets no reply under arp_ignore=0", ip: "fd00:77::60", want: ResultNoReply, wantMACs: []string{}},
		{
			name: "IPv6 VIP on kube-ipvs0 gets no reply with forwarding on and the device up", ip: "fd00:77::60", want: ResultNoReply, wantMACs: []string{},
			setup: func() {
				tp.sysctl(n1, "net.ipv6.conf.all.forwarding", "1")
				tp.run("ip", "-n", n1, "link", "set", "kube-ipvs0", "up")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			target := Target{IP: netip.MustParseAddr(tc.ip)}
			for _, m := range tc.expected {
				target.ExpectedMACs = append(target.ExpectedMACs, mustMAC(t, m))
			}
			res, byIP := runCheck(t, prober, target)
			f, ok := byIP[tc.ip]
			if !ok {
				t.Fatalf("no finding for %s: %+v", tc.ip, res)
			}
			if f.Result != tc.want || !slices.Equal(f.MACs, tc.wantMACs) || f.Interface != "eth0" || f.Family != FamilyOf(target.IP) {
				t.Errorf("ipvs-guard: %s %s on %s by %v, want %s by %v on eth0 (%s)", f.Family, f.Result, f.Interface, f.MACs, tc.want, tc.wantMACs, res.Message)
			}
			if wantStatus := map[bool]check.Status{true: check.StatusProblem, false: check.StatusOK}[tc.want.Problem()]; res.Status != wantStatus {
				t.Errorf("status %s, want %s", res.Status, wantStatus)
			}
			if tc.want != ResultNoReply && f.RTTSeconds <= 0 {
				t.Errorf("answered without an RTT: %+v", f)
			}

			// Same case, the reference tool of the family.
			var got Result
			var macs []string
			var out string
			if target.IP.Is4() {
				ar := arping(t, prober, "eth0", tc.ip, "-c", "2", "-w", "2")
				got, macs, out = arpingVerdict(t, ar, tc.expected), ar.macs, ar.out
			} else {
				nr := ndisc6(t, prober, "eth0", tc.ip, "-r", "2", "-w", "500")
				got, macs, out = ndisc6Verdict(t, nr, tc.expected), nr.macs, nr.out
			}
			if got != f.Result || len(macs) != len(f.MACs) || !slices.Equal(macs, f.MACs) {
				t.Errorf("reference tool says %s (MACs %v), ipvs-guard says %s (MACs %v)\n%s", got, macs, f.Result, f.MACs, out)
			}
		})
	}

	// One run over both families: one ARP and one NDP socket on eth0, and a
	// message that counts each family.
	var targets []Target
	for _, s := range []string{"10.77.0.11", "fd00:77::11", "10.77.0.12", "fd00:77::12"} {
		targets = append(targets, Target{IP: netip.MustParseAddr(s)})
	}
	res, byIP := runCheck(t, prober, targets...)
	if res.Status != check.StatusOK || len(byIP) != 4 || !strings.Contains(res.Message, "every IP this node probes answered ARP and NDP by exactly one MAC") {
		t.Errorf("dual-stack run: %s %q, %d findings", res.Status, res.Message, len(byIP))
	}
	for ipStr, f := range byIP {
		if want := map[bool]string{true: mac1, false: mac2}[strings.HasSuffix(ipStr, "11")]; fmt.Sprint(f.MACs) != fmt.Sprint([]string{want}) {
			t.Errorf("%s answered by %v, want %s", ipStr, f.MACs, want)
		}
	}

	// The prober holds an IPv6 VIP on its own kube-ipvs0-like device, brought
	// up by hand: the kernel adds a main-table host route through it, which
	// must not be where the solicitation goes (nobody answers there).
	tp.vipDevice(prober, "kube-ipvs0")
	tp.run("ip", "-n", prober, "addr", "add", "fd00:77::11/128", "dev", "kube-ipvs0")
	tp.run("ip", "-n", prober, "link", "set", "kube-ipvs0", "up")
	own := Target{IP: netip.MustParseAddr("fd00:77::11")}
	res, byIP = runCheck(t, prober, own)
	if f := byIP["fd00:77::11"]; f.Interface != "eth0" || f.Result != ResultAnswered || fmt.Sprint(f.MACs) != fmt.Sprint([]string{mac1}) {
		t.Errorf("IPv6 VIP also on the prober's kube-ipvs0 (up): %s on %q by %v, want answered on eth0 by %s (%s)", f.Result, f.Interface, f.MACs, mac1, res.Message)
	}

	// With a route but no IPv6 address to solicit from (MetalLB's speaker
	// ignores solicitations from ::), IPv6 IPs are reported as not probed
	// rather than as silent.
	tp.run("ip", "-n", prober, "-6", "addr", "flush", "dev", "eth0")
	tp.run("ip", "-n", prober, "-6", "route", "replace", "fd00:77::/64", "dev", "eth0")
	res, byIP = runCheck(t, prober, targets...)
	if len(byIP) != 2 || res.Status != check.StatusOK || !strings.Contains(res.Message, "answered ARP by exactly one MAC; not probed: fd00:77::11 (eth0 has no usable IPv6 address") {
		t.Errorf("IPv6 off on the prober: %s %q, %d findings", res.Status, res.Message, len(byIP))
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package arpcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// topo is a throwaway set of network namespaces. Every namespace name
// carries a random prefix, so parallel runs never clash, and every one is
// deleted in t.Cleanup, even when the test fails half-way.
type topo struct {
	t      testing.TB
	prefix string
}

func requireNetNS(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "arping", "ndisc6"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" not installed (hack/test-netns.sh installs iproute2, iputils-arping and ndisc6)")
	}
}

func newTopo(t testing.TB) *topo {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return &topo{t: t, prefix: "igarp-" + hex.EncodeToString(b) + "-"}
}

// ns creates a namespace and returns its full name.
func (tp *topo) ns(name string) string {
	tp.t.Helper()
	full := tp.prefix + name
	tp.run("ip", "netns", "add", full)
	tp.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", full).CombinedOutput(); err != nil {
			tp.t.Errorf("deleting netns %s: %v: %s", full, err, out)
		}
	})
	tp.in(full, "ip", "link", "set", "lo", "up")
	// Addresses are usable at once: no duplicate address detection delays
	// (links made later inherit "default").
	tp.sysctl(full, "net.ipv6.conf.all.accept_dad", "0")
	tp.sysctl(full, "net.ipv6.conf.default.accept_dad", "0")
	return full
}

func (tp *topo) run(args ...string) string {
	tp.t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tp.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// in runs a command inside namespace ns.
func (tp *topo) in(ns string, args ...string) string {
	tp.t.Helper()
	return tp.run(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// batch feeds `ip -n ns -batch -` with one command per line.
func (tp *topo) batch(ns string, lines []string) {
	tp.t.Helper()
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		tp.t.Fatalf("ip -n %s -batch: %v\n%s", ns, err, out)
	}
}

// bridge creates a bridge in namespace brNS.
func (tp *topo) bridge(brNS, name string) {
	tp.t.Helper()
	tp.run("ip", "-n", brNS, "link", "add", name, "type", "bridge")
	tp.run("ip", "-n", brNS, "link", "set", name, "up")
}

// plug connects namespace ns to bridge br (in brNS) with a veth whose end in
// ns is called iface and carries cidrs; it returns that end's MAC.
func (tp *topo) plug(brNS, br, port, ns, iface string, cidrs ...string) string {
	tp.t.Helper()
	tp.run("ip", "-n", brNS, "link", "add", port, "type", "veth", "peer", "name", iface, "netns", ns)
	tp.run("ip", "-n", brNS, "link", "set", port, "master", br, "up")
	for _, cidr := range cidrs {
		tp.run("ip", "-n", ns, "addr", "add", cidr, "dev", iface)
	}
	tp.run("ip", "-n", ns, "link", "set", iface, "up")
	return tp.mac(ns, iface)
}

// vipDevice creates a NOARP interface to hold VIPs, as kube-proxy's
// kube-ipvs0: a dummy, or an ifb where the kernel has no dummy driver (ifb
// is NOARP too, and ARP answers for its addresses follow the same
// arp_ignore rules). Like kube-ipvs0 it stays down.
func (tp *topo) vipDevice(ns, name string) {
	tp.t.Helper()
	if err := exec.Command("ip", "-n", ns, "link", "add", name, "type", "dummy").Run(); err == nil {
		return
	}
	tp.t.Logf("no dummy driver in this kernel: %s is an ifb device", name)
	tp.run("ip", "-n", ns, "link", "add", name, "type", "ifb")
}

// show returns `ip -o link show`'s stdout alone: iproute2 warns on stderr
// ("Peer netns reference is invalid.") when a namespace another test is
// removing names a veth's peer, which is no part of the answer.
func (tp *topo) show(ns, iface string) string {
	tp.t.Helper()
	var stderr strings.Builder
	cmd := exec.Command("ip", "-n", ns, "-o", "link", "show", iface)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tp.t.Fatalf("ip -n %s -o link show %s: %v\n%s%s", ns, iface, err, out, stderr.String())
	}
	return string(out)
}

func (tp *topo) mac(ns, iface string) string {
	tp.t.Helper()
	out := tp.show(ns, iface)
	m := regexp.MustCompile(`link/ether ([0-9a-f:]{17})`).FindStringSubmatch(out)
	if m == nil {
		tp.t.Fatalf("no MAC for %s in %s: %s", iface, ns, out)
	}
	return m[1]
}

func (tp *topo) ifindex(ns, iface string) int {
	tp.t.Helper()
	out := tp.show(ns, iface)
	i, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(out, ":", 2)[0]))
	if err != nil {
		tp.t.Fatalf("no index for %s in %s: %s", iface, ns, out)
	}
	return i
}

func (tp *topo) sysctl(ns, key, value string) {
	tp.t.Helper()
	tp.in(ns, "sysctl", "-q", "-w", key+"="+value)
}

// arpingResult is what iputils arping saw.
type arpingResult struct {
	exit int
	macs []string // distinct, sorted
	rtts []time.Duration
	out  string
}

// arpingPrintOffset is what iputils arping (20221126) adds to every RTT it prints.
const arpingPrintOffset = 500 * time.Microsecond

var unicastReply = regexp.MustCompile(`(?m)^Unicast reply from (\S+) \[([0-9A-Fa-f:]{17})\]\s+([0-9.]+)ms`)

// arping runs iputils arping in ns; it keeps broadcasting (-b) so that
// every holder of the address answers every request, as ours do.
func arping(t testing.TB, ns, iface, ip string, args ...string) arpingResult {
	t.Helper()
	full := append([]string{"netns", "exec", ns, "arping", "-b", "-I", iface}, args...)
	full = append(full, ip)
	cmd := exec.Command("ip", full...)
	out, err := cmd.CombinedOutput()
	res := arpingResult{out: string(out)}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running arping: %v", err)
		}
		res.exit = ee.ExitCode()
	}
	seen := map[string]bool{}
	for _, m := range unicastReply.FindAllStringSubmatch(res.out, -1) {
		if m[1] != ip {
			t.Fatalf("arping printed a reply for %s while probing %s:\n%s", m[1], ip, res.out)
		}
		mac := strings.ToLower(m[2])
		if !seen[mac] {
			seen[mac] = true
			res.macs = append(res.macs, mac)
		}
		ms, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("parsing arping RTT %q: %v", m[3], err)
		}
		// iputils 20221126 formats the RTT as `usecs -= msecs*1000 - 500`,
		// which prints 0.5 ms more than it measured: undo that.
		res.rtts = append(res.rtts, time.Duration(ms*float64(time.Millisecond))-arpingPrintOffset)
	}
	slices.Sort(res.macs)
	return res
}

// arpingVerdict applies the package's classification to what arping saw.
func arpingVerdict(t testing.TB, r arpingResult, expected []string) Result {
	t.Helper()
	var macs, exp []net.HardwareAddr
	for _, m := range r.macs {
		macs = append(macs, mustMAC(t, m))
	}
	for _, m := range expected {
		exp = append(exp, mustMAC(t, m))
	}
	// arping's own verdict: it exits 0 only when it received exactly as
	// many replies as it sent requests; silence and several responders per
	// request both make it exit 1.
	if wantExit := map[bool]int{true: 0, false: 1}[len(macs) == 1]; r.exit != wantExit {
		t.Fatalf("arping exit %d with %d replying MACs, want %d:\n%s", r.exit, len(macs), wantExit, r.out)
	}
	return classify(macs, exp)
}

func netnsPath(ns string) string { return "/var/run/netns/" + ns }

// runCheck runs the arp check inside namespace ns for targets.
func runCheck(t testing.TB, ns string, targets ...Target) (check.Result, map[string]Finding) {
	t.Helper()
	c, err := NewChecker(CheckerOptions{
		Targets: StaticTargets(targets...),
		Network: HostNetwork{NetNSPath: netnsPath(ns)},
		Probe:   ProbeOptions{Window: 500 * time.Millisecond, Attempts: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Run(ctx)
	if err != nil {
		t.Fatalf("arp check in %s: %v", ns, err)
	}
	byIP := map[string]Finding{}
	for _, f := range res.Findings {
		af := f.(Finding)
		byIP[af.IP] = af
	}
	return res, byIP
}

// TestNetNSTopology builds a bridge, three "node" namespaces and a prober
// namespace, and checks every verdict against iputils arping on the same
// topology.
func TestNetNSTopology(t *testing.T) {
	requireNetNS(t)
	tp := newTopo(t)
	br := tp.ns("br")
	tp.bridge(br, "br0")
	tp.bridge(br, "br1")
	prober := tp.ns("prober")
	n1, n2, n3 := tp.ns("node1"), tp.ns("node2"), tp.ns("node3")
	proberMAC := tp.plug(br, "br0", "p0", prober, "eth0", "10.77.0.1/24")
	mac1 := tp.plug(br, "br0", "n1", n1, "eth0", "10.77.0.11/24")
	mac2 := tp.plug(br, "br0", "n2", n2, "eth0", "10.77.0.12/24")
	mac3 := tp.plug(br, "br0", "n3", n3, "eth0", "10.77.0.13/24")
	_ = proberMAC
	// The same address on two nodes.
	tp.run("ip", "-n", n2, "addr", "add", "10.77.0.50/24", "dev", "eth0")
	tp.run("ip", "-n", n3, "addr", "add", "10.77.0.50/24", "dev", "eth0")
	// A VIP on a dummy interface, as kube-proxy puts it on kube-ipvs0.
	tp.vipDevice(n1, "kube-ipvs0")
	tp.run("ip", "-n", n1, "addr", "add", "10.77.0.60/32", "dev", "kube-ipvs0")
	tp.sysctl(n1, "net.ipv4.conf.all.arp_ignore", "0")

	type tcase struct {
		name     string
		ip       string
		expected []string
		want     Result
		wantMACs []string
		setup    func()
	}
	sorted := func(m ...string) []string { s := slices.Clone(m); slices.Sort(s); return s }
	cases := []tcase{
		{name: "owned address answers", ip: "10.77.0.11", want: ResultAnswered, wantMACs: []string{mac1}},
		{name: "unused address gets no reply", ip: "10.77.0.99", want: ResultNoReply, wantMACs: []string{}},
		{name: "address on two nodes conflicts", ip: "10.77.0.50", want: ResultConflict, wantMACs: sorted(mac2, mac3)},
		{name: "VIP on dummy with arp_ignore=0 answers", ip: "10.77.0.60", want: ResultAnswered, wantMACs: []string{mac1}},
		{name: "expected MAC differs", ip: "10.77.0.12", expected: []string{mac3}, want: ResultWrongResponder, wantMACs: []string{mac2}},
		{name: "expected MAC matches", ip: "10.77.0.13", expected: []string{mac3}, want: ResultAnswered, wantMACs: []string{mac3}},
		{
			name: "VIP on dummy with arp_ignore=1 gets no reply", ip: "10.77.0.60", want: ResultNoReply, wantMACs: []string{},
			setup: func() { tp.sysctl(n1, "net.ipv4.conf.all.arp_ignore", "1") },
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
			if f.Result != tc.want || !slices.Equal(f.MACs, tc.wantMACs) || f.Interface != "eth0" {
				t.Errorf("ipvs-guard: %s on %s by %v, want %s by %v on eth0 (%s)", f.Result, f.Interface, f.MACs, tc.want, tc.wantMACs, res.Message)
			}
			if wantStatus := map[bool]check.Status{true: check.StatusProblem, false: check.StatusOK}[tc.want.Problem()]; res.Status != wantStatus {
				t.Errorf("status %s, want %s", res.Status, wantStatus)
			}
			if tc.want != ResultNoReply && f.RTTSeconds <= 0 {
				t.Errorf("answered without an RTT: %+v", f)
			}

			// Same case, iputils arping.
			ar := arping(t, prober, "eth0", tc.ip, "-c", "2", "-w", "2")
			if got := arpingVerdict(t, ar, tc.expected); got != f.Result {
				t.Errorf("arping says %s (MACs %v), ipvs-guard says %s (MACs %v)\n%s", got, ar.macs, f.Result, f.MACs, ar.out)
			}
			if len(ar.macs) != len(f.MACs) || !slices.Equal(ar.macs, f.MACs) {
				t.Errorf("arping saw MACs %v, ipvs-guard %v", ar.macs, f.MACs)
			}
		})
	}
}

// TestNetNSRouteChoosesInterface checks that a prober with two interfaces
// sends each request where the route says, including for an address that is
// local to the prober (a LoadBalancer IP on its own kube-ipvs0) and for a
// subnet reached only through an explicit route.
func TestNetNSRouteChoosesInterface(t *testing.T) {
	requireNetNS(t)
	tp := newTopo(t)
	br := tp.ns("br")
	tp.bridge(br, "br0")
	tp.bridge(br, "br1")
	prober := tp.ns("prober")
	n1, n3 := tp.ns("node1"), tp.ns("node3")
	tp.plug(br, "br0", "p0", prober, "eth0", "10.77.0.2/24")
	tp.plug(br, "br1", "p1", prober, "eth1", "10.78.0.2/24")
	mac1 := tp.plug(br, "br0", "n1", n1, "eth0", "10.77.0.11/24")
	mac3 := tp.plug(br, "br1", "n3", n3, "eth1", "10.78.0.13/24")
	tp.run("ip", "-n", n3, "addr", "add", "10.79.0.5/24", "dev", "eth1")
	tp.run("ip", "-n", prober, "route", "add", "10.79.0.0/24", "dev", "eth1")
	// Like every IPVS node, the prober holds the LoadBalancer IP on kube-ipvs0.
	tp.vipDevice(prober, "kube-ipvs0")
	tp.run("ip", "-n", prober, "addr", "add", "10.77.0.11/32", "dev", "kube-ipvs0")

	tests := []struct {
		target    Target
		wantIface string
		want      Result
		wantMACs  []string
	}{
		{target: Target{IP: netip.MustParseAddr("10.77.0.11")}, wantIface: "eth0", want: ResultAnswered, wantMACs: []string{mac1}},
		{target: Target{IP: netip.MustParseAddr("10.78.0.13")}, wantIface: "eth1", want: ResultAnswered, wantMACs: []string{mac3}},
		{target: Target{IP: netip.MustParseAddr("10.79.0.5")}, wantIface: "eth1", want: ResultAnswered, wantMACs: []string{mac3}},
		// --interface forces the wrong segment: nobody there holds it.
		{target: Target{IP: netip.MustParseAddr("10.78.0.13"), Interface: "eth0"}, wantIface: "eth0", want: ResultNoReply, wantMACs: []string{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s via %s", tt.target.IP, tt.wantIface), func(t *testing.T) {
			res, byIP := runCheck(t, prober, tt.target)
			f := byIP[tt.target.IP.String()]
			if f.Interface != tt.wantIface || f.Result != tt.want || !slices.Equal(f.MACs, tt.wantMACs) {
				t.Errorf("got %s on %s by %v, want %s on %s by %v (%s)", f.Result, f.Interface, f.MACs, tt.want, tt.wantIface, tt.wantMACs, res.Message)
			}
			ar := arping(t, prober, tt.wantIface, tt.target.IP.String(), "-c", "2", "-w", "2")
			if got := arpingVerdict(t, ar, nil); got != f.Result {
				t.Errorf("arping on %s says %s, ipvs-guard says %s\n%s", tt.wantIface, got, f.Result, ar.out)
			}
		})
	}

	// An address behind a gateway is not on a segment we can ARP.
	tp.run("ip", "-n", prober, "route", "add", "default", "via", "10.77.0.254")
	c, err := NewChecker(CheckerOptions{
		Targets: StaticTargets(Target{IP: netip.MustParseAddr("192.0.2.7")}),
		Network: HostNetwork{NetNSPath: netnsPath(prober)},
		Probe:   ProbeOptions{Window: 100 * time.Millisecond, Limiter: rate.NewLimiter(rate.Inf, 1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "192.0.2.7") {
		t.Errorf("probing an address behind a gateway: err = %v, want one naming it", err)
	}
}

// TestNetNSDiagnoseCLI runs `ipvs-guard diagnose --probe-ip` inside the
// prober namespace and checks the JSON contract (docs/design.md §8) and exit code.
func TestNetNSDiagnoseCLI(t *testing.T) {
	requireNetNS(t)
	bin := ipvsguardtest.Binary(t)
	tp := newTopo(t)
	br := tp.ns("br")
	tp.bridge(br, "br0")
	prober := tp.ns("prober")
	n1, n2 := tp.ns("node1"), tp.ns("node2")
	tp.plug(br, "br0", "p0", prober, "eth0", "10.77.0.1/24", "fd00:77::1/64")
	mac1 := tp.plug(br, "br0", "n1", n1, "eth0", "10.77.0.11/24", "fd00:77::11/64")
	tp.plug(br, "br0", "n2", n2, "eth0", "10.77.0.12/24")

	run := func(args ...string) (int, map[string]any) {
		t.Helper()
		cmd := exec.Command("ip", append([]string{"netns", "exec", prober, bin, "diagnose", "-o", "json"}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var report map[string]any
		if err := json.Unmarshal([]byte(stdout.String()), &report); err != nil {
			t.Fatalf("diagnose %v: output is not JSON: %v\n%s\n%s", args, err, stdout.String(), stderr.String())
		}
		// Other checks (modules, …) run too: the exit code follows all of them.
		want := 0
		for _, c := range report["checks"].([]any) {
			switch c.(map[string]any)["status"] {
			case "problem":
				want = 1
			case "error":
				if want == 0 {
					want = 2
				}
			}
		}
		if code != want {
			t.Errorf("diagnose %v: exit %d, want %d from the checks' statuses", args, code, want)
		}
		return code, report
	}
	arpCheck := func(report map[string]any) map[string]any {
		for _, c := range report["checks"].([]any) {
			if c.(map[string]any)["name"] == check.NameARP {
				return c.(map[string]any)
			}
		}
		t.Fatalf("no arp check in %v", report)
		return nil
	}

	_, report := run("--probe-ip", "10.77.0.11")
	c := arpCheck(report)
	if c["status"] != "ok" {
		t.Errorf("answered IP: check %v", c)
	}
	f := c["findings"].([]any)[0].(map[string]any)
	keys := slices.Sorted(maps.Keys(f))
	if want := []string{"family", "interface", "ip", "macs", "result", "rtt_seconds"}; !slices.Equal(keys, want) {
		t.Errorf("finding keys %v, want %v", keys, want)
	}
	if f["ip"] != "10.77.0.11" || f["family"] != "ipv4" || f["interface"] != "eth0" || f["result"] != "answered" ||
		!slices.Equal(f["macs"].([]any), []any{mac1}) || f["rtt_seconds"].(float64) <= 0 {
		t.Errorf("finding %v", f)
	}

	code, report := run("--probe-ip", "10.77.0.11,10.77.0.99", "--interface", "eth0")
	c = arpCheck(report)
	if code != 1 || c["status"] != "problem" || c["reason"] != ReasonNoReply || !strings.Contains(c["message"].(string), "10.77.0.99 on eth0") {
		t.Errorf("silent IP: exit %d, check %v", code, c)
	}

	// --probe-ip takes IPv6 addresses: probed with NDP, a finding per family.
	code, report = run("--probe-ip", "fd00:77::11,10.77.0.11,fd00:77::99")
	c = arpCheck(report)
	results := map[string]string{}
	for _, f := range c["findings"].([]any) {
		f := f.(map[string]any)
		results[fmt.Sprint(f["ip"], " ", f["family"])] = fmt.Sprint(f["result"], " ", f["macs"])
	}
	want := map[string]string{
		"fd00:77::11 ipv6": "answered [" + mac1 + "]", "10.77.0.11 ipv4": "answered [" + mac1 + "]", "fd00:77::99 ipv6": "no-reply []",
	}
	if code != 1 || !maps.Equal(results, want) || !strings.Contains(c["message"].(string), "1 IP(s) fail NDP") {
		t.Errorf("dual-stack probe: exit %d, findings %v, want %v; message %q", code, results, want, c["message"])
	}

	_, report = run()
	c = arpCheck(report)
	if c["status"] != "skipped" || c["message"] != "no LoadBalancer IPs to probe" {
		t.Errorf("no probe IPs: check %v", c)
	}
}

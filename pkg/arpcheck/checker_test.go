// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

func TestFindingJSON(t *testing.T) {
	tests := []struct {
		name string
		f    Finding
		want string
	}{
		{
			name: "no reply keeps an empty macs array",
			f:    Finding{IP: "10.0.0.9", Family: FamilyIPv4, Interface: "eth0", Result: ResultNoReply, MACs: []string{}},
			want: `{"ip":"10.0.0.9","family":"ipv4","interface":"eth0","result":"no-reply","macs":[],"rtt_seconds":0}`,
		},
		{
			name: "answered",
			f:    Finding{IP: "fd00::9", Family: FamilyIPv6, Interface: "eth0", Result: ResultAnswered, MACs: []string{"52:54:00:00:00:0a"}, RTTSeconds: 0.00025},
			want: `{"ip":"fd00::9","family":"ipv6","interface":"eth0","result":"answered","macs":["52:54:00:00:00:0a"],"rtt_seconds":0.00025}`,
		},
		{
			name: "wrong responder with context",
			f: Finding{
				IP: "10.0.0.9", Family: FamilyIPv4, Interface: "eth0", Result: ResultWrongResponder, MACs: []string{"52:54:00:00:00:0b"},
				RTTSeconds: 0.001, ExpectedMACs: []string{"52:54:00:00:00:0a"}, ExpectedNode: "node-a",
				ResponderNodes: []string{"node-b"}, Service: "default/web",
			},
			want: `{"ip":"10.0.0.9","family":"ipv4","interface":"eth0","result":"wrong-responder","macs":["52:54:00:00:00:0b"],"rtt_seconds":0.001,` +
				`"expected_macs":["52:54:00:00:00:0a"],"expected_node":"node-a","responder_nodes":["node-b"],"service":"default/web"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(b)); diff != "" {
				t.Errorf("JSON (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFindingString(t *testing.T) {
	tests := []struct {
		f    Finding
		want string
	}{
		{
			f:    Finding{IP: "10.0.0.9", Interface: "eth0", Result: ResultNoReply, MACs: []string{}},
			want: "10.0.0.9 on eth0: no-reply, no MAC answered",
		},
		{
			f: Finding{IP: "10.0.0.9", Interface: "eth0", Result: ResultNoReply, MACs: []string{}, Service: "default/web",
				Unannounced: "MetalLB announces it from no node (no ServiceL2Status)"},
			want: "10.0.0.9 (default/web) on eth0: no-reply, no MAC answered: MetalLB announces it from no node (no ServiceL2Status)",
		},
		{
			f:    Finding{IP: "10.0.0.9", Interface: "eth0", Result: ResultAnswered, MACs: []string{"52:54:00:00:00:0a"}, RTTSeconds: 0.00025},
			want: "10.0.0.9 on eth0: answered by 52:54:00:00:00:0a in 250µs",
		},
		{
			f: Finding{IP: "10.0.0.9", Interface: "eth0", Result: ResultConflict, MACs: []string{"52:54:00:00:00:0a", "52:54:00:00:00:0b"},
				ResponderNodes: []string{"node-a", ""}, Service: "default/web"},
			want: "10.0.0.9 (default/web) on eth0: conflict, 2 MACs answer: 52:54:00:00:00:0a (node-a), 52:54:00:00:00:0b",
		},
		{
			f: Finding{IP: "10.0.0.9", Interface: "eth0", Result: ResultWrongResponder, MACs: []string{"52:54:00:00:00:0b"}, RTTSeconds: 0.0015,
				ExpectedMACs: []string{"52:54:00:00:00:0a"}, ExpectedNode: "node-a", ResponderNodes: []string{"node-b"}},
			want: "10.0.0.9 on eth0: wrong-responder by 52:54:00:00:00:0b (node-b) in 1.50ms, expected 52:54:00:00:00:0a (node-a)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.f.String(); got != tt.want {
				t.Errorf("String() = %q\nwant        %q", got, tt.want)
			}
		})
	}
}

func TestParseTargets(t *testing.T) {
	got, err := ParseTargets([]string{"10.0.0.9, fd00::a", "::ffff:10.0.0.11", ""}, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{IP: ip("10.0.0.9"), Interface: "eth1"},
		{IP: ip("fd00::a"), Interface: "eth1"},
		{IP: ip("10.0.0.11"), Interface: "eth1"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"10.0.0", "fd00::1%eth0", "fd00:::1", "host.example"} {
		if _, err := ParseTargets([]string{bad}, ""); err == nil {
			t.Errorf("ParseTargets(%q) succeeded", bad)
		}
	}
}

// TestParseTargetsRefusesNonUnicast: no single host answers address
// resolution for these, so a probe would only time out.
func TestParseTargetsRefusesNonUnicast(t *testing.T) {
	tests := []struct {
		name, ip string
		wantErr  bool
	}{
		{"IPv4 limited broadcast", "255.255.255.255", true},
		{"IPv4 all-hosts multicast", "224.0.0.1", true},
		{"SSDP multicast", "239.255.255.250", true},
		{"IPv4 multicast, mapped", "::ffff:224.0.0.251", true},
		{"IPv4 unspecified", "0.0.0.0", true},
		{"IPv4 this network (0.0.0.0/8)", "0.0.0.1", true},
		{"first address after 0.0.0.0/8", "1.0.0.0", false},
		{"IPv4 loopback", "127.0.0.1", true},
		{"IPv4 loopback, not the first", "127.1.2.3", true},
		{"IPv6 all-nodes link-local multicast", "ff02::1", true},
		{"IPv6 interface-local multicast", "ff01::1", true},
		{"IPv6 global multicast", "ff0e::1", true},
		{"IPv6 unspecified", "::", true},
		{"IPv6 loopback", "::1", true},
		{"IPv4 unicast", "192.0.2.10", false},
		{"IPv4 link-local unicast", "169.254.10.1", false},
		{"IPv4 last before multicast", "223.255.255.254", false},
		{"IPv6 unicast", "2001:db8::10", false},
		{"IPv6 unique local", "fd00::a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTargets([]string{"192.0.2.1," + tt.ip}, "")
			if tt.wantErr && !errors.Is(err, ErrUnprobeable) {
				t.Errorf("ParseTargets(%s) = %v, want ErrUnprobeable", tt.ip, err)
			}
			if !tt.wantErr && err != nil {
				t.Errorf("ParseTargets(%s) = %v, want no error", tt.ip, err)
			}
		})
	}
}

func TestChecker(t *testing.T) {
	macA := mustMAC(t, "52:54:00:00:00:0a")
	macB := mustMAC(t, "52:54:00:00:00:0b")
	macC := mustMAC(t, "52:54:00:00:00:0c")
	dir := &fakeDirectory{owners: map[string]string{macA.String(): "node-a", macB.String(): "node-b"}}
	hosts := []*responder{
		{mac: macA, ips: []netip.Addr{ip("10.0.0.10"), ip("10.0.0.12"), ip("10.0.0.13")}},
		{mac: macB, ips: []netip.Addr{ip("10.0.0.12")}},
		{mac: macC, ips: []netip.Addr{ip("10.0.0.14"), ip("fd00::14")}},
		{mac: macA, ips: []netip.Addr{ip("fd00::10"), ip("fd00::12")}},
		{mac: macB, ips: []netip.Addr{ip("fd00::12")}},
	}
	routes := map[string]Route{
		"eth0": {Interface: "eth0", Index: 2, MAC: proberMAC, Src: proberIP},
		"eth1": {Interface: "eth1", Index: 3, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, Src: ip("10.1.0.1")},
	}
	type want struct {
		status   check.Status
		reason   string
		results  map[string]string
		message  []string // substrings
		findings int
	}
	tests := []struct {
		name    string
		targets []Target
		noRoute map[netip.Addr]error
		want    want
	}{
		{
			name:    "all answered",
			targets: []Target{{IP: ip("10.0.0.10")}, {IP: ip("10.0.0.13"), Interface: "eth1"}},
			want: want{status: check.StatusOK, reason: ReasonAnswered, findings: 2,
				results: map[string]string{"10.0.0.10@eth0": "answered", "10.0.0.13@eth1": "answered"}},
		},
		{
			name:    "no reply",
			targets: []Target{{IP: ip("10.0.0.10")}, {IP: ip("10.0.0.11")}},
			want: want{status: check.StatusProblem, reason: ReasonNoReply, findings: 2,
				results: map[string]string{"10.0.0.10@eth0": "answered", "10.0.0.11@eth0": "no-reply"},
				message: []string{"1 IP(s) fail ARP", "10.0.0.11 on eth0: no-reply"}},
		},
		{
			name: "conflict outranks wrong responder and no reply",
			targets: []Target{
				{IP: ip("10.0.0.11")},
				{IP: ip("10.0.0.12"), Service: "default/web"},
				{IP: ip("10.0.0.14"), ExpectedMACs: []net.HardwareAddr{macA}, ExpectedNode: "node-a"},
			},
			want: want{status: check.StatusProblem, reason: ReasonConflict, findings: 3,
				results: map[string]string{"10.0.0.11@eth0": "no-reply", "10.0.0.12@eth0": "conflict", "10.0.0.14@eth0": "wrong-responder"},
				message: []string{
					"10.0.0.12 (default/web) on eth0: conflict, 2 MACs answer: 52:54:00:00:00:0a (node-a), 52:54:00:00:00:0b (node-b)",
					"10.0.0.14 on eth0: wrong-responder by 52:54:00:00:00:0c in", "expected 52:54:00:00:00:0a (node-a)",
				}},
		},
		{
			name:    "announcer named, another node answers",
			targets: []Target{{IP: ip("10.0.0.10"), ExpectedNode: "node-b"}},
			want: want{status: check.StatusProblem, reason: ReasonWrongResponder, findings: 1,
				results: map[string]string{"10.0.0.10@eth0": "wrong-responder"},
				message: []string{"by 52:54:00:00:00:0a (node-a)", "expected node node-b"}},
		},
		{
			name:    "announcer named, unknown MAC answers",
			targets: []Target{{IP: ip("10.0.0.14"), ExpectedNode: "node-b"}},
			want: want{status: check.StatusOK, reason: ReasonAnswered, findings: 1,
				results: map[string]string{"10.0.0.14@eth0": "answered"}},
		},
		{
			name:    "wrong responder",
			targets: []Target{{IP: ip("10.0.0.10"), ExpectedMACs: []net.HardwareAddr{macB}}},
			want: want{status: check.StatusProblem, reason: ReasonWrongResponder, findings: 1,
				results: map[string]string{"10.0.0.10@eth0": "wrong-responder"}},
		},
		{
			name:    "dual-stack: both families probed and named",
			targets: []Target{{IP: ip("10.0.0.10")}, {IP: ip("fd00::10")}, {IP: ip("::ffff:10.0.0.13")}},
			want: want{status: check.StatusOK, reason: ReasonAnswered, findings: 3,
				results: map[string]string{"10.0.0.10@eth0/ipv4": "answered", "fd00::10@eth0/ipv6": "answered", "10.0.0.13@eth0/ipv4": "answered"},
				message: []string{"every IP this node probes answered ARP and NDP by exactly one MAC"}},
		},
		{
			name: "IPv6 verdicts as ARP's",
			targets: []Target{
				{IP: ip("fd00::10"), ExpectedMACs: []net.HardwareAddr{macA}},
				{IP: ip("fd00::11")},
				{IP: ip("fd00::12")},
				{IP: ip("fd00::14"), ExpectedMACs: []net.HardwareAddr{macA}},
				{IP: ip("10.0.0.10"), Interface: "eth1"},
			},
			want: want{status: check.StatusProblem, reason: ReasonConflict, findings: 5,
				results: map[string]string{
					"fd00::10@eth0/ipv6": "answered", "fd00::11@eth0/ipv6": "no-reply", "fd00::12@eth0/ipv6": "conflict",
					"fd00::14@eth0/ipv6": "wrong-responder", "10.0.0.10@eth1/ipv4": "answered",
				},
				message: []string{"3 IP(s) fail NDP", "fd00::12 on eth0: conflict, 2 MACs answer: 52:54:00:00:00:0a (node-a), 52:54:00:00:00:0b (node-b)"}},
		},
		{
			name:    "unroutable target is reported, not probed",
			targets: []Target{{IP: ip("10.0.0.10")}, {IP: ip("192.0.2.1")}},
			noRoute: map[netip.Addr]error{ip("192.0.2.1"): ErrNotOnLink},
			want: want{status: check.StatusOK, reason: ReasonAnswered, findings: 1,
				results: map[string]string{"10.0.0.10@eth0": "answered"},
				message: []string{"answered ARP by exactly one MAC; not probed: 192.0.2.1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			netw := &fakeNetwork{routes: routes, first: "eth0", hosts: hosts, t: t, noRoute: tt.noRoute}
			c, err := NewChecker(CheckerOptions{
				Targets:   StaticTargets(tt.targets...),
				Network:   netw,
				Probe:     ProbeOptions{Window: 100 * time.Millisecond, Attempts: 2, Limiter: rate.NewLimiter(rate.Inf, 1)},
				Directory: dir,
			})
			if err != nil {
				t.Fatal(err)
			}
			if c.Name() != check.NameARP {
				t.Errorf("Name() = %q", c.Name())
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := want{status: res.Status, reason: res.Reason, findings: len(res.Findings), results: map[string]string{}, message: tt.want.message}
			for _, f := range res.Findings {
				af := f.(Finding)
				key := af.IP + "@" + af.Interface
				if strings.Contains(tt.name, "IPv6") || strings.Contains(tt.name, "dual-stack") {
					key += "/" + string(af.Family)
				}
				if af.Family != FamilyOf(ip(af.IP)) {
					t.Errorf("%s has family %q", af.IP, af.Family)
				}
				got.results[key] = af.Result.String()
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("result (-want +got):\n%s\nmessage: %s", diff, res.Message)
			}
			for _, s := range tt.want.message {
				if !strings.Contains(res.Message, s) {
					t.Errorf("message %q lacks %q", res.Message, s)
				}
			}
			if (res.Status == check.StatusProblem) != (len(res.Remediation) > 0) {
				t.Errorf("status %s with remediation %q", res.Status, res.Remediation)
			}
			netw.mu.Lock()
			defer netw.mu.Unlock()
			for _, c := range netw.conns {
				if !c.closed {
					t.Error("a socket was left open")
				}
			}
		})
	}
}

func TestCheckerSkipsWithoutTargets(t *testing.T) {
	c, err := NewChecker(CheckerOptions{Targets: StaticTargets(), Network: &fakeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := check.Result{Name: check.NameARP, Status: check.StatusSkipped, Reason: ReasonNoTargets, Message: "no LoadBalancer IPs to probe"}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

func TestCheckerErrors(t *testing.T) {
	if _, err := NewChecker(CheckerOptions{}); err == nil {
		t.Error("NewChecker without targets succeeded")
	}
	boom := errors.New("API down")
	c, _ := NewChecker(CheckerOptions{Targets: func(context.Context) ([]Target, error) { return nil, boom }, Network: &fakeNetwork{}})
	if _, err := c.Run(context.Background()); !errors.Is(err, boom) {
		t.Errorf("Run error = %v, want %v", err, boom)
	}
	c, _ = NewChecker(CheckerOptions{
		Targets: StaticTargets(Target{IP: ip("192.0.2.1")}),
		Network: &fakeNetwork{noRoute: map[netip.Addr]error{ip("192.0.2.1"): ErrNotOnLink}},
	})
	if _, err := c.Run(context.Background()); !strings.Contains(fmtErr(err), "192.0.2.1") {
		t.Errorf("Run error = %v, want one naming the unroutable IP", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestCheckerDeadline: a run with more IPs than its deadline leaves time for
// ends in time with the verdicts it reached (never "interrupted"), says that
// some IPs are not probed yet, and the next runs probe those first, so every
// IP has its verdict after a few runs, each verdict right.
func TestCheckerDeadline(t *testing.T) {
	const n = 40
	var targets []Target
	var answering []netip.Addr
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)})
		targets = append(targets, Target{IP: a})
		if i%2 == 0 {
			answering = append(answering, a)
		}
	}
	netw := &fakeNetwork{
		routes: map[string]Route{"eth0": {Interface: "eth0", Index: 2, MAC: proberMAC, Src: proberIP}},
		first:  "eth0", t: t,
		hosts: []*responder{{mac: mustMAC(t, "52:54:00:00:00:0a"), ips: answering}},
	}
	// 50 requests/s, one attempt, 100 ms windows: a 600 ms run has time for
	// about 20 first requests, so 40 IPs need at least two runs.
	c, err := NewChecker(CheckerOptions{
		Targets: StaticTargets(targets...),
		Network: netw,
		Probe:   ProbeOptions{Window: 100 * time.Millisecond, Attempts: 1, Limiter: rate.NewLimiter(50, 1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 600 * time.Millisecond
	var res check.Result
	runs := 0
	for runs < 6 {
		runs++
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		res, err = c.Run(ctx)
		late := ctx.Err()
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", runs, err)
		}
		if late != nil {
			t.Fatalf("run %d returned after its deadline", runs)
		}
		if runs == 1 {
			if len(res.Findings) == 0 || len(res.Findings) >= n {
				t.Fatalf("run 1: %d findings, want some but not all %d", len(res.Findings), n)
			}
			if !strings.Contains(res.Message, "some IPs are not probed yet") {
				t.Errorf("run 1 message does not say some IPs are not probed yet: %q", res.Message)
			}
		}
		if len(res.Findings) == n {
			break
		}
	}
	if len(res.Findings) != n {
		t.Fatalf("after %d runs %d findings, want %d", runs, len(res.Findings), n)
	}
	if runs < 2 {
		t.Fatalf("every IP probed in one run: the deadline did not bind")
	}
	for _, f := range res.Findings {
		f := f.(Finding)
		a := netip.MustParseAddr(f.IP)
		want := ResultNoReply
		if a.As4()[3]%2 == 1 {
			want = ResultAnswered
		}
		if f.Result != want {
			t.Errorf("%s: %s, want %s", f.IP, f.Result, want)
		}
	}
	if res.Status != check.StatusProblem || res.Reason != ReasonNoReply {
		t.Errorf("status %s %s, want %s %s", res.Status, res.Reason, check.StatusProblem, ReasonNoReply)
	}
	if strings.Contains(res.Message, "not probed yet") {
		t.Errorf("every IP has a verdict, yet the message says some are not probed: %q", res.Message)
	}
	t.Logf("%d runs of %v to cover %d IPs", runs, budget, n)
}

// fakeDirectory names MACs from owners and returns published[node] (stale[node]
// unless fresh, when set) as a node's MACs; it logs every call.
type fakeDirectory struct {
	owners           map[string]string
	published, stale map[string][]net.HardwareAddr
	mu               sync.Mutex
	calls            []string
}

func (d *fakeDirectory) NodeMACs(_ context.Context, node string, fresh bool) []net.HardwareAddr {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf("macs %s fresh=%v", node, fresh))
	if s, ok := d.stale[node]; ok && !fresh {
		return s
	}
	return d.published[node]
}

func (d *fakeDirectory) NodeForMAC(_ context.Context, mac net.HardwareAddr, lookup bool) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf("name %s lookup=%v", mac, lookup))
	n, ok := d.owners[mac.String()]
	return n, ok
}

// TestCheckerDirectoryReads checks what the checker asks the directory: an
// announcer's MACs only once its IP answered, again fresh only when a reply
// is not among them, and a lookup of a responder only where the verdict
// depends on it.
func TestCheckerDirectoryReads(t *testing.T) {
	macA := mustMAC(t, "52:54:00:00:00:0a")
	macB := mustMAC(t, "52:54:00:00:00:0b")
	macC := mustMAC(t, "52:54:00:00:00:0c")
	hosts := []*responder{
		{mac: macA, ips: []netip.Addr{ip("10.0.0.10"), ip("10.0.0.12")}},
		{mac: macB, ips: []netip.Addr{ip("10.0.0.12"), ip("10.0.0.13")}},
		{mac: macC, ips: []netip.Addr{ip("10.0.0.14")}},
	}
	routes := map[string]Route{"eth0": {Interface: "eth0", Index: 2, MAC: mustMAC(t, "52:54:00:00:00:01"), Src: ip("10.0.0.1")}}
	tests := []struct {
		name    string
		targets []Target
		dir     *fakeDirectory
		result  string
		calls   []string
	}{
		{name: "no reply: nothing read",
			targets: []Target{{IP: ip("10.0.0.11"), ExpectedNode: "node-a"}},
			dir:     &fakeDirectory{},
			result:  "no-reply"},
		{name: "the announcer's MAC answers: read once, named from what is known",
			targets: []Target{{IP: ip("10.0.0.10"), ExpectedNode: "node-a"}},
			dir:     &fakeDirectory{published: map[string][]net.HardwareAddr{"node-a": {macA}}, owners: map[string]string{macA.String(): "node-a"}},
			result:  "answered",
			calls:   []string{"macs node-a fresh=false", "name 52:54:00:00:00:0a lookup=false"}},
		{name: "stale MACs: re-read fresh, then answered",
			targets: []Target{{IP: ip("10.0.0.10"), ExpectedNode: "node-a"}},
			dir:     &fakeDirectory{stale: map[string][]net.HardwareAddr{"node-a": {macB}}, published: map[string][]net.HardwareAddr{"node-a": {macA}}},
			result:  "answered",
			calls:   []string{"macs node-a fresh=false", "macs node-a fresh=true", "name 52:54:00:00:00:0a lookup=false"}},
		{name: "another node answers: re-read, then the responder looked up",
			targets: []Target{{IP: ip("10.0.0.13"), ExpectedNode: "node-a"}},
			dir:     &fakeDirectory{published: map[string][]net.HardwareAddr{"node-a": {macA}}, owners: map[string]string{macB.String(): "node-b"}},
			result:  "wrong-responder",
			calls:   []string{"macs node-a fresh=false", "macs node-a fresh=true", "name 52:54:00:00:00:0b lookup=true"}},
		{name: "announcer published nothing: the responder looked up",
			targets: []Target{{IP: ip("10.0.0.14"), ExpectedNode: "node-x"}},
			dir:     &fakeDirectory{owners: map[string]string{macC.String(): "node-c"}},
			result:  "wrong-responder",
			calls:   []string{"macs node-x fresh=false", "macs node-x fresh=true", "name 52:54:00:00:00:0c lookup=true"}},
		{name: "no announcer known: answered, named from what is known",
			targets: []Target{{IP: ip("10.0.0.14")}},
			dir:     &fakeDirectory{},
			result:  "answered",
			calls:   []string{"name 52:54:00:00:00:0c lookup=false"}},
		{name: "conflict: every responder looked up",
			targets: []Target{{IP: ip("10.0.0.12"), ExpectedNode: "node-a"}},
			dir:     &fakeDirectory{published: map[string][]net.HardwareAddr{"node-a": {macA}}},
			result:  "conflict",
			calls:   []string{"macs node-a fresh=false", "name 52:54:00:00:00:0a lookup=true", "name 52:54:00:00:00:0b lookup=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker(CheckerOptions{
				Targets:   StaticTargets(tt.targets...),
				Network:   &fakeNetwork{routes: routes, first: "eth0", hosts: hosts, t: t},
				Probe:     ProbeOptions{Window: 100 * time.Millisecond, Attempts: 2, Limiter: rate.NewLimiter(rate.Inf, 1)},
				Directory: tt.dir,
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Findings[0].(Finding).Result.String(); got != tt.result {
				t.Errorf("result %s, want %s: %s", got, tt.result, res.Message)
			}
			if diff := cmp.Diff(tt.calls, tt.dir.calls); diff != "" {
				t.Errorf("directory calls (-want +got):\n%s", diff)
			}
		})
	}
}

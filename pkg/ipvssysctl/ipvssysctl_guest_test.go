// SPDX-License-Identifier: Apache-2.0

//go:build guest

package ipvssysctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/guestmodules"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvssysctl"
)

func sh(t *testing.T, cmd string) string {
	t.Helper()
	r := guest.Run(t, "sh", "-c", cmd)
	if r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	return r.Stdout
}

// sysctlN reads a sysctl with the sysctl command, as an operator would.
func sysctlN(t *testing.T, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.TrimSpace(sh(t, "sysctl -n "+name)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// advisories runs the check and returns its advisories (name → severity)
// and the values it read (name → value).
func advisories(t *testing.T, c check.Checker) (map[string]string, map[string]int64) {
	t.Helper()
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s/%s: %s", res.Status, res.Reason, res.Message)
	if res.Status != check.StatusOK {
		t.Errorf("status %s, want ok (advisories never make the node unhealthy)", res.Status)
	}
	adv, vals := map[string]string{}, map[string]int64{}
	for _, f := range res.Findings {
		sf := f.(ipvssysctl.Finding)
		vals[sf.Sysctl] = sf.Value
		if sf.Advisory != "" {
			adv[sf.Advisory] = sf.Severity
		}
	}
	return adv, vals
}

// TestGuestIPVSSysctls sets the IPVS sysctls with sysctl and IPVS's
// timeouts with ipvsadm --set on bookworm's real kernel (6.1) and compares
// the check's verdicts and values with what sysctl and ipvsadm print, in
// process and through the binary's diagnose -o json.
func TestGuestIPVSSysctls(t *testing.T) {
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	t.Cleanup(func() { guest.ResetModules(t) })
	guestmodules.LoadNative(t, "ip_vs")
	h := ipvs.New(hostfs.New("/"))
	defer h.Close()
	c := ipvssysctl.NewChecker(ipvssysctl.Config{Root: hostfs.New("/"), Timeouts: h})
	timeoutRE := regexp.MustCompile(`Timeout \(tcp tcpfin udp\): (\d+) (\d+) (\d+)`)
	compare := func(vals map[string]int64) {
		t.Helper()
		for _, name := range []string{ipvssysctl.SysctlConnReuseMode, ipvssysctl.SysctlExpireNodestConn, ipvssysctl.SysctlExpireQuiescent, ipvssysctl.SysctlVSConntrack, ipvssysctl.SysctlTCPKeepaliveTime} {
			if got, want := vals[name], sysctlN(t, name); got != want {
				t.Errorf("%s: check read %d, sysctl -n says %d", name, got, want)
			}
		}
		out := sh(t, "ipvsadm -L --timeout")
		m := timeoutRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ipvsadm -L --timeout: %q", out)
		}
		for i, name := range []string{ipvssysctl.TimeoutTCP, ipvssysctl.TimeoutTCPFin, ipvssysctl.TimeoutUDP} {
			if got := strconv.FormatInt(vals[name], 10); got != m[i+1] {
				t.Errorf("%s: check read %s, ipvsadm says %s", name, got, m[i+1])
			}
		}
		t.Logf("ipvsadm: %s", strings.TrimSpace(out))
	}

	steps := []struct {
		name string
		cmd  string
		want map[string]string
	}{
		{name: "kernel defaults (no kube-proxy)", cmd: "true", want: map[string]string{
			ipvssysctl.AdvisoryExpireNodestConnOff: ipvssysctl.SeverityWarning, ipvssysctl.AdvisoryExpireQuiescentOff: ipvssysctl.SeverityWarning,
			ipvssysctl.AdvisoryConntrackOff: ipvssysctl.SeverityWarning, ipvssysctl.AdvisoryTCPTimeoutBelowKeep: ipvssysctl.SeverityWarning}},
		{name: "as kube-proxy sets them, TCP timeout 900 s", cmd: "sysctl -w net.ipv4.vs.expire_nodest_conn=1 net.ipv4.vs.expire_quiescent_template=1 net.ipv4.vs.conntrack=1",
			want: map[string]string{ipvssysctl.AdvisoryTCPTimeoutBelowKeep: ipvssysctl.SeverityWarning}},
		{name: "TCP timeout above keepalive (ipvsadm --set 7300 120 300)", cmd: "ipvsadm --set 7300 120 300", want: map[string]string{}},
		{name: "conn_reuse_mode 0 on 6.1", cmd: "sysctl -w net.ipv4.vs.conn_reuse_mode=0", want: map[string]string{ipvssysctl.AdvisoryConnReuseStickyBackend: ipvssysctl.SeverityInfo}},
		{name: "keepalive lowered below the default TCP timeout", cmd: "sysctl -w net.ipv4.vs.conn_reuse_mode=1 net.ipv4.tcp_keepalive_time=600 && ipvsadm --set 900 120 300", want: map[string]string{}},
	}
	t.Cleanup(func() { guest.Run(t, "sysctl", "-w", "net.ipv4.tcp_keepalive_time=7200") })
	for _, s := range steps {
		sh(t, s.cmd)
		adv, vals := advisories(t, c)
		compare(vals)
		if fmt.Sprint(adv) != fmt.Sprint(s.want) {
			t.Errorf("%s: advisories %v, want %v", s.name, adv, s.want)
		}
		// The same through the binary.
		r := guest.IPVSGuard(t, "diagnose", "-o", "json", "--node-name", "guest")
		var rep struct {
			Checks []struct {
				Name, Status string
				Findings     []ipvssysctl.Finding
			} `json:"checks"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		got := map[string]string{}
		for _, ch := range rep.Checks {
			if ch.Name != check.NameIPVSSysctls {
				continue
			}
			for _, f := range ch.Findings {
				if f.Advisory != "" {
					got[f.Advisory] = f.Severity
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("%s: diagnose advisories %v, want %v", s.name, got, s.want)
		}
	}
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("modprobe was executed: %q", calls)
	}
}

// TestGuestConntrackPressure lowers nf_conntrack_max with sysctl and fills
// the real table with ctnetlink entries (as `conntrack -I` does): below
// 90% ok, from 90% the advisory, at the limit a problem, each compared with
// the count sysctl prints at the same moment.
func TestGuestConntrackPressure(t *testing.T) {
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	t.Cleanup(func() { guest.ResetModules(t) })
	guestmodules.LoadNative(t, "nf_conntrack", "nf_conntrack_netlink")
	sh(t, "sysctl -w net.netfilter.nf_conntrack_max=20")
	c := ipvssysctl.NewConntrackChecker(hostfs.New("/"))
	created := 0
	fill := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			created++
			flow := &netlink.ConntrackFlow{FamilyType: unix.AF_INET, TimeOut: 600,
				Forward: netlink.IPTuple{SrcIP: net.IPv4(10, 1, 0, 1), DstIP: net.IPv4(10, 2, 0, 1), Protocol: unix.IPPROTO_UDP, SrcPort: uint16(20000 + created), DstPort: 53},
				Reverse: netlink.IPTuple{SrcIP: net.IPv4(10, 2, 0, 1), DstIP: net.IPv4(10, 1, 0, 1), Protocol: unix.IPPROTO_UDP, SrcPort: 53, DstPort: uint16(20000 + created)}}
			if err := netlink.ConntrackCreate(netlink.ConntrackTable, netlink.FAMILY_V4, flow); err != nil {
				t.Logf("entry %d: %v (the table is full)", created, err)
			}
		}
	}
	for _, s := range []struct {
		add        int
		wantStatus check.Status
		wantReason string
	}{
		{add: 17, wantStatus: check.StatusOK, wantReason: ipvssysctl.ReasonConntrackOK},
		{add: 2, wantStatus: check.StatusOK, wantReason: ipvssysctl.ReasonConntrackNearlyFull},
		{add: 3, wantStatus: check.StatusProblem, wantReason: ipvssysctl.ReasonConntrackFull},
	} {
		fill(s.add)
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		count := sysctlN(t, "net.netfilter.nf_conntrack_count")
		f := res.Findings[0].(ipvssysctl.ConntrackFinding)
		t.Logf("%d created, sysctl count %d: %s/%s: %s", created, count, res.Status, res.Reason, res.Message)
		if f.Entries != count || f.Max != 20 {
			t.Errorf("check read %d of %d, sysctl says %d of 20", f.Entries, f.Max, count)
		}
		if res.Status != s.wantStatus || res.Reason != s.wantReason {
			t.Errorf("after %d entries: %s/%s, want %s/%s", created, res.Status, res.Reason, s.wantStatus, s.wantReason)
		}
	}
	r := guest.IPVSGuard(t, "diagnose", "--node-name", "guest")
	if !strings.Contains(r.Stdout, "[PROBLEM] conntrack (ConntrackTableFull)") || r.ExitCode != 1 {
		t.Errorf("diagnose with a full table: want [PROBLEM] conntrack and exit 1:\n%s", r)
	}
	sh(t, "sysctl -w net.netfilter.nf_conntrack_max=262144")
}

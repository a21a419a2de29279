// SPDX-License-Identifier: Apache-2.0

//go:build migrate && linux

package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/internal/l2segment"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// ipvsConditions are the guest's conditions that only mean something in
// IPVS mode: after the switch each must be False with reason IPVSNotInUse.
var ipvsConditions = []string{string(nodestatus.IPVSModulesMissing), string(nodestatus.KubeProxyIPVSDegraded), string(nodestatus.StrictARPDisabled)}

// Names of the readiness report the tier proves once diagnose has
// --target-mode (see TestMigrate).
const (
	checkReadiness      = "nftables-readiness"
	checkLeftovers      = "ipvs-leftovers"
	reasonIPVSInUse     = "IPVSInUse"
	reasonIPVSLeftovers = "IPVSLeftovers"
)

// leftoverKinds are the finding kinds of the ipvs-leftovers check.
var leftoverKinds = []string{"kube-ipvs0", "virtual-server", "ipset", "sysctl", "modules-load-file"}

// ipvsArgs are kube-proxy's flags in IPVS mode (besides those
// mg_kp_start sets): strictARP on, as MetalLB's L2 mode requires; the
// periodic resync at 10 min because under TCG one full sync round keeps
// the guest's only vCPU busy for many seconds (changes still sync at once).
const ipvsArgs = "--ipvs-scheduler=rr --ipvs-strict-arp=true --ipvs-sync-period=10m --v=1"

// TestMigrate is the migration of one node from kube-proxy's IPVS mode to
// nftables mode and back, with a ClusterIP and a MetalLB LoadBalancer IP in
// use, as hack/migrate/README.md tells it.
func TestMigrate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newCluster(t, ctx)
	c.joinGuest()
	c.service()
	c.startSpeaker()
	c.guestRun(`mg_kp_start ipvs ` + ipvsArgs)
	c.guestRun(`kp_wait_table 180 ` + clusterIP + ` ` + c.lbIP.String())
	c.waitFor("MetalLB's ServiceL2Status names the guest", waitLong, func() (bool, string) {
		n := c.l2Status()
		return n == guestName, "announcer " + strconv.Quote(n)
	})
	c.startAgents()
	c.step("setup done")
	t.Logf("setup: guest %s (%s) as %s; probe node %s (%s); %s/%s: ClusterIP %s, LoadBalancer IP %s announced by the guest's speaker",
		c.guest.tap.IP, c.guest.tap.MAC, c.guest.dev, c.probe.IP, c.probe.MAC, "default", svcName, clusterIP, c.lbIP)

	targetMode := c.hasTargetMode()
	if !targetMode {
		t.Log("SKIP ************************************************************************")
		t.Log("SKIP `ipvs-guard diagnose --help` lists no --target-mode: the nftables-readiness and")
		t.Log("SKIP ipvs-leftovers assertions (the foreign virtual server named, the leftovers")
		t.Log("SKIP reported exactly) are NOT proved by this run")
		t.Log("SKIP ************************************************************************")
	}

	c.step("IPVS mode: Services answer, one ARP responder, prerequisites apply")
	c.expectIPVSMode(t, "before the switch")

	c.step("a foreign virtual server, and the readiness report")
	c.guestRun(`ipvsadm -A -t ` + foreignVS + `:80 -s rr && ipvsadm -Ln -t ` + foreignVS + `:80`)
	t.Logf("a foreign virtual server: ipvsadm -A -t %s:80 -s rr", foreignVS)
	if targetMode {
		c.expectReadiness(t)
	}
	warn := map[string]int{}
	for _, a := range ipvsConditions {
		warn[a] = c.warnings(guestName, a)
	}
	// The probe node's Warning Events for LoadBalancerARPFailing: those
	// with reason ARPNoReply, and the others.
	probeOther := c.warningsExcept(probeName, string(nodestatus.LoadBalancerARPFailing), arpcheck.ReasonNoReply)
	probeWarn := [2]int{c.warnings(probeName, string(nodestatus.LoadBalancerARPFailing)) - probeOther, probeOther}

	c.step("switch to nftables mode")
	sw := c.switchToNftables(t)

	c.step("nftables mode: no IPVS alarm, one ARP responder throughout, IPVS state as kube-proxy's cleanup leaves it")
	c.expectNoAlarm(t, sw, warn, probeWarn)
	cleaned := c.expectSwitchCleanup(t, kmodPath)
	if mode := strings.TrimSpace(c.guestRun(`wget -qO- http://127.0.0.1:10249/proxyMode`)); mode != "nftables" {
		t.Errorf("kube-proxy's /proxyMode = %q, want nftables", mode)
	}
	left := c.guestRun(`echo "sysctls (arp_ignore arp_announce vs/conntrack vs/expire_nodest_conn vs/expire_quiescent_template):" $(cat /proc/sys/net/ipv4/conf/all/arp_ignore /proc/sys/net/ipv4/conf/all/arp_announce /proc/sys/net/ipv4/vs/conntrack /proc/sys/net/ipv4/vs/expire_nodest_conn /proc/sys/net/ipv4/vs/expire_quiescent_template)
echo "KUBE-* ipsets: $(ipset list -n 2>/dev/null | grep -c '^KUBE-')"
echo "iptables KUBE-* chains: $(iptables-save 2>/dev/null | grep -c '^:KUBE-') ($(iptables-save 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\).*/\1/p' | tr '\n' ' '))"
echo "kube-ipvs0: $(ip link show kube-ipvs0 >/dev/null 2>&1 && echo present || echo gone)"
echo "virtual servers: $(ipvsadm -Sn | grep -c '^-A')"
echo "nf_tables modules (users):" $(awk '$1 ~ /^(nf_tables|nft_)/ {print $1 "(" $3 ")"}' /proc/modules)`)
	t.Logf("what IPVS mode left behind after the switch (kinds %v):\n%s", c.observedLeftovers(), left)
	rep := c.diagnose(t, "")
	if r := rep.check(check.NameModules); r == nil || r.Reason != check.ReasonIPVSNotInUse {
		t.Errorf("diagnose in nftables mode: modules check %+v, want reason %s", r, check.ReasonIPVSNotInUse)
	}
	if targetMode {
		c.expectLeftovers(t, rep, cleaned)
	}

	c.step("back to IPVS mode: prerequisites apply again")
	back := time.Now()
	c.guestRun(`mg_kp_start ipvs ` + ipvsArgs)
	d := c.waitFor("the guest's IPVS conditions leave IPVSNotInUse", waitLong, c.ipvsConditionsApply)
	c.figure("switch back to ipvs → conditions apply again (reasons not IPVSNotInUse)", "%.1fs", d.Seconds())
	c.guestRun(`kp_wait_table 180 ` + clusterIP + ` ` + c.lbIP.String())
	c.figure("switch back to ipvs → ClusterIP and LB IP programmed (kube-ipvs0, virtual servers)", "%.1fs", time.Since(back).Seconds())
	c.expectIPVSMode(t, "after the switch back")

	// RKE2's kube-proxy image has no modprobe: its IPVS cleanup at the
	// switch stops at `modprobe -va ip_vs` and removes nothing. The same
	// kube-proxy binary without kmod's modprobe on its PATH (the guest's
	// own modprobe is a tripwire that fails) shows it.
	c.step("as on RKE2 (no modprobe for kube-proxy): the switch removes nothing")
	c.guestRun(`ipvsadm -A -t ` + foreignVS + `:80 -s rr && ipvsadm -Ln -t ` + foreignVS + `:80`)
	c.guestRun(`MG_KP_PATH="$PATH" mg_kp_start nftables --v=1`)
	c.waitGuest("kube-proxy serves /proxyMode nftables", waitLong, `[ "$(wget -qO- http://127.0.0.1:10249/proxyMode)" = nftables ]`)
	c.waitFor("the guest's IPVS conditions say IPVSNotInUse", waitLong, c.ipvsConditionsOff)
	if c.expectSwitchCleanup(t, guestPath) {
		t.Error("kube-proxy's modprobe -va ip_vs succeeded with only the guest's tripwire modprobe on its PATH")
	}
	if targetMode {
		rep := c.diagnose(t, "")
		c.expectLeftovers(t, rep, false)
		var kinds []string
		if r := rep.check(checkLeftovers); r != nil {
			for _, f := range r.Findings {
				if k, _ := f["kind"].(string); !slices.Contains(kinds, k) {
					kinds = append(kinds, k)
				}
			}
		}
		for _, k := range []string{"kube-ipvs0", "virtual-server"} {
			if !slices.Contains(kinds, k) {
				t.Errorf("with nothing removed at the switch, ipvs-leftovers reports kinds %v, without %s", kinds, k)
			}
		}
	}
	c.printFigures()
}

// kube-proxy's PATH in the guest, as the shell words it: kmod's modprobe
// first (the upstream image), or the guest's own PATH, whose modprobe is a
// tripwire that fails (RKE2's image, which has none).
const (
	kmodPath  = "/usr/libexec/kmod:$PATH"
	guestPath = "$PATH"
)

// hasTargetMode reports whether the guest's ipvs-guard has diagnose
// --target-mode (the readiness report).
func (c *cluster) hasTargetMode() bool {
	_, code := c.guestTry(`ipvs-guard diagnose --help 2>&1 | grep -q -- --target-mode`)
	return code == 0
}

// expectIPVSMode checks the node in IPVS mode: kube-proxy reports ipvs, the
// ClusterIP answers in the guest and the LoadBalancer IP from the segment,
// arping and the probe node's agent see exactly the guest's MAC, the
// guest's IPVS conditions are False with their own reasons (the
// prerequisites apply), and, with the readiness report, ipvs-leftovers is
// skipped as IPVSInUse.
func (c *cluster) expectIPVSMode(t *testing.T, when string) {
	c.waitGuest("kube-proxy reports ipvs", waitLong, `[ "$(wget -qO- http://127.0.0.1:10249/proxyMode)" = ipvs ]`)
	c.waitGuest("the ClusterIP answers in the guest", waitLong, `timeout 2 wget -qO- http://`+clusterIP+`/ | grep -q '^backend guest'`)
	c.waitFor("the LoadBalancer IP answers from the probe node", waitLong, func() (bool, string) { return c.get(c.lbIP.String()) })
	c.waitFor("the guest's IPVS conditions are False with their own reasons", waitLong, c.ipvsConditionsApply)
	for _, typ := range ipvsConditions {
		cd := c.condition(guestName, typ)
		t.Logf("%s: guest %s=%s (%s): %s", when, typ, cd.Status, cd.Reason, cd.Message)
	}
	c.waitFor("the probe node's agent sees exactly one responder", waitLong, func() (bool, string) {
		r, n := c.probeARP()
		return r == "answered" && n == 1, fmt.Sprintf("result %q, %v responders", r, n)
	})
	if a := c.arping(4, 6*time.Second); !slices.Equal(a.MACs, []string{c.guest.tap.MAC}) {
		t.Errorf("%s: arping %s from the probe node saw %v, want exactly the guest's %s:\n%s", when, c.lbIP, a.MACs, c.guest.tap.MAC, a.Output)
	}
	if cd := c.condition(probeName, string(nodestatus.LoadBalancerARPFailing)); cd.Status != corev1.ConditionFalse {
		t.Errorf("%s: probe node LoadBalancerARPFailing=%s (%s): %s", when, cd.Status, cd.Reason, cd.Message)
	}
	if c.hasTargetMode() {
		rep := c.diagnose(t, "")
		r := rep.check(checkLeftovers)
		if r == nil {
			r = c.diagnose(t, "nftables").check(checkLeftovers)
		}
		if r == nil || r.Status != check.StatusSkipped || r.Reason != reasonIPVSInUse {
			t.Errorf("%s: diagnose's %s check = %+v, want skipped with reason %s", when, checkLeftovers, r, reasonIPVSInUse)
		}
	}
}

// ipvsConditionsApply reports whether every IPVS condition of the guest is
// False with a reason other than IPVSNotInUse.
func (c *cluster) ipvsConditionsApply() (bool, string) {
	var seen []string
	ok := true
	for _, typ := range ipvsConditions {
		cd := c.condition(guestName, typ)
		seen = append(seen, fmt.Sprintf("%s=%s (%s)", typ, cd.Status, cd.Reason))
		if cd.Status != corev1.ConditionFalse || cd.Reason == "" || cd.Reason == check.ReasonIPVSNotInUse {
			ok = false
		}
	}
	return ok, strings.Join(seen, ", ")
}

// ipvsConditionsOff reports whether every IPVS condition of the guest is
// False with reason IPVSNotInUse.
func (c *cluster) ipvsConditionsOff() (bool, string) {
	var seen []string
	ok := true
	for _, typ := range ipvsConditions {
		cd := c.condition(guestName, typ)
		seen = append(seen, fmt.Sprintf("%s=%s (%s)", typ, cd.Status, cd.Reason))
		if cd.Status != corev1.ConditionFalse || cd.Reason != check.ReasonIPVSNotInUse {
			ok = false
		}
	}
	return ok, strings.Join(seen, ", ")
}

// metricsOff reports whether the guest agent's /metrics gives every IPVS
// condition the reason IPVSNotInUse (ipvs_guard_node_condition_reason).
func (c *cluster) metricsOff() bool {
	mfs, err := c.scrape(c.guest.tap.IP)
	if err != nil {
		return false
	}
	off := map[string]bool{}
	for _, m := range mfs["ipvs_guard_node_condition_reason"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["reason"] == check.ReasonIPVSNotInUse && m.GetGauge().GetValue() == 1 {
			off[labels["condition"]] = true
		}
	}
	for _, typ := range ipvsConditions {
		if !off[typ] {
			return false
		}
	}
	return true
}

// report is diagnose's JSON report, findings kept as objects.
type report struct {
	Healthy bool `json:"healthy"`
	Checks  []struct {
		Name     string           `json:"name"`
		Status   check.Status     `json:"status"`
		Reason   string           `json:"reason"`
		Message  string           `json:"message"`
		Findings []map[string]any `json:"findings"`
	} `json:"checks"`
	raw string
}

type checkResult struct {
	Status   check.Status
	Reason   string
	Message  string
	Findings []map[string]any
}

// check returns the named check's result (nil when the report has none).
func (r report) check(name string) *checkResult {
	for _, c := range r.Checks {
		if c.Name == name {
			return &checkResult{c.Status, c.Reason, c.Message, c.Findings}
		}
	}
	return nil
}

// diagnose runs `ipvs-guard diagnose --output json` in the guest, with the
// node's kubeconfig as an operator would (the cluster's Services tell
// kube-proxy's virtual servers from foreign ones), and --target-mode when
// target is set.
func (c *cluster) diagnose(t *testing.T, target string) report {
	t.Helper()
	args := "--output json --kubeconfig=/run/e2e/node.kubeconfig --node-name=" + guestName
	if target != "" {
		args += " --target-mode " + target
	}
	start := time.Now()
	out, code := c.guestTry(`ipvs-guard diagnose ` + args + ` 2>/dev/null`)
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("ipvs-guard diagnose %s: exit %d, not a JSON report (%v):\n%s", args, code, err, out)
	}
	rep.raw = out
	t.Logf("ipvs-guard diagnose %s: exit %d after %.1fs (guest under TCG)", args, code, time.Since(start).Seconds())
	return rep
}

// expectReadiness takes the readiness report in IPVS mode: the
// nftables-readiness check is there, its findings carry a kind and a
// severity, and one names the foreign virtual server.
func (c *cluster) expectReadiness(t *testing.T) {
	rep := c.diagnose(t, "nftables")
	r := rep.check(checkReadiness)
	if r == nil {
		t.Fatalf("diagnose --target-mode nftables has no %s check:\n%s", checkReadiness, rep.raw)
	}
	t.Logf("%s: %s (%s): %s", checkReadiness, r.Status, r.Reason, r.Message)
	named := false
	for _, f := range r.Findings {
		kind, _ := f["kind"].(string)
		sev, _ := f["severity"].(string)
		if kind == "" || sev == "" {
			t.Errorf("%s finding without kind or severity: %v", checkReadiness, f)
		}
		b, _ := json.Marshal(f)
		t.Logf("  finding %s/%s: %s", kind, sev, b)
		if strings.Contains(string(b), "TCP "+foreignVS+":80") {
			named = true
		}
	}
	if !named {
		t.Errorf("no %s finding names the foreign virtual server TCP %s:80:\n%s", checkReadiness, foreignVS, rep.raw)
	}
}

// ipvsCleanupChains and the KUBE-* ipsets are what kube-proxy 1.37's IPVS
// cleanup removes besides the virtual servers and kube-ipvs0
// (pkg/proxy/ipvs/proxier.go iptablesCleanupChains and ipsetInfo, removed
// by pkg/proxy/ipvs/cleanup.go cleanupLeftovers).
var ipvsCleanupChains = []string{"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-MARK-MASQ",
	"KUBE-FORWARD", "KUBE-PROXY-FIREWALL", "KUBE-SOURCE-RANGES-FIREWALL", "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER"}

// expectSwitchCleanup asserts what kube-proxy's IPVS cleanup left at the
// switch to nftables mode and returns whether it ran. kube-proxy 1.37 runs
// `modprobe -va ip_vs` first and removes nothing when that fails
// (pkg/proxy/ipvs/cleanup.go CleanupLeftovers): with modprobe on its PATH
// (the upstream image, kubeadm; this guest gives it kmod's) every virtual
// server, the foreign one included, kube-ipvs0, IPVS mode's iptables
// chains and KUBE-* ipsets are gone, and the sysctls and modules-load.d
// file stay; without it (RKE2's image) all of it stays.
func (c *cluster) expectSwitchCleanup(t *testing.T, kpPath string) bool {
	// kube-proxy runs `modprobe` through Go's exec.LookPath on its PATH
	// (mg_kp_start): the first executable modprobe in it, looked up the
	// same way here (not through the guest's busybox sh, whose own
	// modprobe applet would answer instead).
	probe, code := c.guestTry(`p="` + kpPath + `"; IFS=:; for d in $p; do
	if [ -x "$d/modprobe" ]; then unset IFS; echo "$d/modprobe:"; "$d/modprobe" -va ip_vs 2>&1; exit $?; fi
done
echo "no modprobe on kube-proxy's PATH"; exit 1`)
	runs := code == 0
	t.Logf("kube-proxy's `modprobe -va ip_vs` as its IPVS cleanup runs it (exit %d): %s", code, strings.TrimSpace(probe))
	state := c.guestRun(`echo "kube-ipvs0 $(ip link show kube-ipvs0 >/dev/null 2>&1 && echo present || echo gone)"
echo "virtual-servers $(ipvsadm -Sn | grep -c '^-A')"
echo "foreign $(ipvsadm -Ln -t ` + foreignVS + `:80 >/dev/null 2>&1 && echo present || echo gone)"
echo "ipsets $(ipset list -n 2>/dev/null | grep '^KUBE-' | tr '\n' ' ')"
echo "chains $(iptables-save 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\).*/\1/p' | sort -u | tr '\n' ' ')"`)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(state), "\n") {
		k, v, _ := strings.Cut(line, " ")
		got[k] = strings.TrimSpace(v)
	}
	t.Logf("after the switch (kube-proxy's modprobe -va ip_vs succeeds: %v): %v", runs, got)
	var chains []string
	for _, ch := range strings.Fields(got["chains"]) {
		if slices.Contains(ipvsCleanupChains, ch) {
			chains = append(chains, ch)
		}
	}
	if runs {
		if got["kube-ipvs0"] != "gone" || got["virtual-servers"] != "0" || got["foreign"] != "gone" || got["ipsets"] != "" || len(chains) > 0 {
			t.Errorf("kube-proxy's IPVS cleanup ran (modprobe on its PATH) but left IPVS state: kube-ipvs0 %s, %s virtual server(s) (foreign %s:80 %s), ipsets [%s], IPVS chains %v",
				got["kube-ipvs0"], got["virtual-servers"], foreignVS, got["foreign"], got["ipsets"], chains)
		}
		return true
	}
	if got["kube-ipvs0"] != "present" || got["foreign"] != "present" || got["ipsets"] == "" || len(chains) == 0 {
		t.Errorf("kube-proxy's IPVS cleanup cannot run (no modprobe on its PATH) but kube-ipvs0 is %s, the foreign virtual server %s:80 %s, ipsets [%s], IPVS chains %v",
			got["kube-ipvs0"], foreignVS, got["foreign"], got["ipsets"], chains)
	}
	return false
}

// expectLeftovers compares diagnose's ipvs-leftovers findings in nftables
// mode with what the guest holds: exactly the kinds present, and, when
// kube-proxy's IPVS cleanup ran (cleaned), exactly what it leaves: the
// sysctls and the modules-load.d file.
func (c *cluster) expectLeftovers(t *testing.T, rep report, cleaned bool) {
	r := rep.check(checkLeftovers)
	if r == nil {
		r = c.diagnose(t, "nftables").check(checkLeftovers)
	}
	if r == nil {
		t.Fatalf("no %s check in diagnose's report:\n%s", checkLeftovers, rep.raw)
	}
	want := c.observedLeftovers()
	var got []string
	for _, f := range r.Findings {
		kind, _ := f["kind"].(string)
		if !slices.Contains(leftoverKinds, kind) {
			t.Errorf("%s finding of unknown kind %q: %v", checkLeftovers, kind, f)
		}
		if !slices.Contains(got, kind) {
			got = append(got, kind)
		}
		b, _ := json.Marshal(f)
		t.Logf("  leftover %s", b)
	}
	slices.Sort(got)
	slices.Sort(want)
	if r.Reason != reasonIPVSLeftovers && len(want) > 0 {
		t.Errorf("%s: %s (%s), want reason %s", checkLeftovers, r.Status, r.Reason, reasonIPVSLeftovers)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s reports kinds %v, the guest holds %v", checkLeftovers, got, want)
	}
	if left := []string{"modules-load-file", "sysctl"}; cleaned && !slices.Equal(want, left) {
		t.Errorf("after kube-proxy's IPVS cleanup the guest holds %v, want exactly %v (strict ARP's sysctls and ipvs.conf, which kube-proxy never removes)", want, left)
	}
}

// observedLeftovers returns what IPVS mode left on the guest, as the kinds
// of the ipvs-leftovers check: kube-ipvs0, virtual servers, KUBE-* ipsets,
// strict ARP's or IPVS's sysctls off their defaults, the modules-load.d file.
func (c *cluster) observedLeftovers() []string {
	out := c.guestRun(`ip link show kube-ipvs0 >/dev/null 2>&1 && echo kube-ipvs0
[ -n "$(ipvsadm -Sn)" ] && echo virtual-server
ipset list -n 2>/dev/null | grep -q '^KUBE-' && echo ipset
s=$(cat /proc/sys/net/ipv4/conf/all/arp_ignore /proc/sys/net/ipv4/conf/all/arp_announce /proc/sys/net/ipv4/vs/conntrack /proc/sys/net/ipv4/vs/expire_nodest_conn /proc/sys/net/ipv4/vs/expire_quiescent_template 2>/dev/null | tr -d '\n')
[ "$s" != 00000 ] && echo sysctl
[ -e /etc/modules-load.d/ipvs.conf ] && echo modules-load-file
true`)
	return strings.Fields(out)
}

// sample is one observation during the switch.
type sample struct {
	at time.Time
	// probeResult and responders are the probe agent's view of the LB IP.
	probeResult string
	responders  float64
	// alarms are the guest's IPVS conditions that were not False, and
	// reasons their "type/reason".
	alarms, reasons []string
}

// switchRun is what the switch produced.
type switchRun struct {
	// at is kube-proxy's start in nftables mode on the host's clock.
	at      time.Time
	samples []sample
	arping  l2segment.ArpingResult
	lbFails int
	// gap is how long the agent had no word from kube-proxy while IPVS was
	// gone: from the last ClusterIP GET answered through IPVS (kube-proxy's
	// cleanup flushing the table) to kube-proxy serving /proxyMode
	// nftables.
	gap time.Duration
}

// switchToNftables restarts kube-proxy with --proxy-mode=nftables while
// the guest polls the ClusterIP, the probe node polls the LoadBalancer IP
// and arpings it, and the test samples the probe agent's ARP view and the
// guest's conditions; it measures switch → conditions, → VIP, → LB IP.
func (c *cluster) switchToNftables(t *testing.T) switchRun {
	var sw switchRun
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	type lbGet struct {
		at time.Time
		ok bool
	}
	var lb []lbGet

	c.guestRun(`vip_poll_start ` + clusterIP)
	wg.Add(3)
	go func() { // the probe agent's ARP view and the guest's conditions
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			s := sample{at: time.Now()}
			s.probeResult, s.responders = c.probeARP()
			for _, typ := range ipvsConditions {
				if cd := c.condition(guestName, typ); cd.Status != corev1.ConditionFalse {
					s.alarms = append(s.alarms, fmt.Sprintf("%s=%s (%s): %s", typ, cd.Status, cd.Reason, cd.Message))
					s.reasons = append(s.reasons, typ+"/"+cd.Reason)
				}
			}
			mu.Lock()
			sw.samples = append(sw.samples, s)
			mu.Unlock()
		}
	}()
	go func() { // a GET of the LoadBalancer IP from the segment every 250 ms
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			ok, _ := c.get(c.lbIP.String())
			mu.Lock()
			lb = append(lb, lbGet{time.Now(), ok})
			mu.Unlock()
		}
	}()
	go func() { // iputils arping across the switch
		defer wg.Done()
		r, err := c.probe.Arping(c.ctx, c.lbIP, 25, 25*time.Second)
		if err != nil {
			r.Output += "\n" + err.Error()
		}
		mu.Lock()
		sw.arping = r
		mu.Unlock()
	}()
	stopAll := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
		c.guestTry(`vip_poll_stop >/dev/null`)
	}
	defer stopAll()

	time.Sleep(2 * time.Second) // a few samples in IPVS mode first
	up0, host0 := c.guestUptime()
	out := c.guestRun(`mg_kp_start nftables --v=1`)
	var kpStart float64
	if _, err := fmt.Sscanf(strings.TrimSpace(out[strings.Index(out, "kube-proxy-start"):]), "kube-proxy-start %f", &kpStart); err != nil {
		t.Fatalf("kube-proxy's start time: %v: %q", err, out)
	}
	guestToHost := func(g float64) time.Time { return host0.Add(time.Duration((g - up0) * float64(time.Second))) }
	sw.at = guestToHost(kpStart)
	t.Logf("kube-proxy restarted with --proxy-mode=nftables at guest time %.2fs", kpStart)

	// The Node's conditions and the agent's /metrics (the reason of each
	// condition), polled together.
	var condAt, metAt time.Time
	dCond := c.waitFor("the guest's IPVS conditions and their reasons in /metrics say IPVSNotInUse", waitLong, func() (bool, string) {
		if condAt.IsZero() {
			if ok, _ := c.ipvsConditionsOff(); ok {
				condAt = time.Now()
			}
		}
		if metAt.IsZero() && c.metricsOff() {
			metAt = time.Now()
		}
		_, why := c.ipvsConditionsOff()
		return !condAt.IsZero() && !metAt.IsZero(), fmt.Sprintf("%s; /metrics reasons IPVSNotInUse: %v", why, !metAt.IsZero())
	})

	// The ClusterIP, polled in the guest: the first GET answered while
	// only kube-proxy's nftables table holds it (its IPVS cleanup done).
	var nftFirst, vipOK, modeAt float64
	var vipFails int
	var lastIPVSok float64
	c.waitFor("the ClusterIP answers through nftables (guest poll)", waitLong, func() (bool, string) {
		log, _ := c.guestTry(`cat /run/e2e/vip-poll.log`)
		nftFirst, vipOK, vipFails, lastIPVSok, modeAt = 0, 0, 0, 0, 0
		var tail string
		for _, line := range strings.Split(log, "\n") {
			f := strings.Fields(line)
			if len(f) != 4 {
				continue
			}
			tail = line
			at, err := strconv.ParseFloat(f[0], 64)
			if err != nil || at < kpStart {
				continue
			}
			if f[2] == "fail" && vipOK == 0 {
				vipFails++
			}
			if f[1] == "ipvs" && f[2] == "ok" {
				lastIPVSok = at
			}
			if f[3] == "nftables" && modeAt == 0 {
				modeAt = at
			}
			if f[1] == "nft" && nftFirst == 0 {
				nftFirst = at
			}
			if f[1] == "nft" && f[2] == "ok" && vipOK == 0 {
				vipOK = at
			}
		}
		return vipOK > 0, "last poll: " + tail
	})
	nftAt := guestToHost(nftFirst)
	// The LoadBalancer IP from the segment: the first GET answered after
	// the guest's IPVS state was gone.
	var lbOK time.Time
	c.waitFor("the LoadBalancer IP answers from the segment through nftables", waitLong, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range lb {
			if g.ok && !g.at.Before(nftAt) {
				lbOK = g.at
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d GETs", len(lb))
	})
	// What kube-proxy did meanwhile, in its own words (--v=1): its IPVS
	// cleanup, the nftables proxier's start, its first sync.
	kp, _ := c.guestTry(`sed -n '/^=== kube-proxy .*--proxy-mode=nftables/,$p' /run/e2e/kube-proxy.log | grep -v -e 'FLAG:' -e 'Waiting for caches' -e 'Starting .* config controller' | head -n 40`)
	t.Logf("kube-proxy's log from its start in nftables mode:\n%s", kp)
	// Keep watching a little after the last milestone.
	time.Sleep(5 * time.Second)
	stopAll()
	mu.Lock()
	defer mu.Unlock()
	for _, g := range lb {
		if !g.ok && g.at.After(sw.at) && g.at.Before(lbOK) {
			sw.lbFails++
		}
	}
	c.figure("switch (kube-proxy --proxy-mode=nftables started) → Node conditions IPVSNotInUse", "%.1fs (waited %.1fs from the restart request)", condAt.Sub(sw.at).Seconds(), dCond.Seconds())
	c.figure("switch → agent /metrics condition reasons IPVSNotInUse", "%.1fs", metAt.Sub(sw.at).Seconds())
	if modeAt > 0 {
		mode := guestToHost(modeAt)
		c.figure("switch → kube-proxy serves /proxyMode nftables (guest poll)", "%.1fs", modeAt-kpStart)
		c.figure("kube-proxy serves /proxyMode nftables → Node conditions IPVSNotInUse", "%.1fs (agent resync %s, kube-proxy answers reused for %s)", condAt.Sub(mode).Seconds(), resync, kubeproxy.DefaultUseTTL)
	}
	if lastIPVSok > 0 {
		c.figure("switch → last ClusterIP GET answered by IPVS", "%.1fs", lastIPVSok-kpStart)
		if modeAt > 0 {
			sw.gap = time.Duration((modeAt - lastIPVSok) * float64(time.Second))
			// kube-proxy's IPVS cleanup runs before it serves /proxyMode:
			// meanwhile the agent still assumes IPVS (kube-proxy's last
			// answer) and the ipvs check's 30 s settle time is all that
			// keeps the empty table from being an alarm.
			c.figure("IPVS gone (last GET through IPVS) → /proxyMode nftables (agent's settle time is 30s)", "%.1fs", modeAt-lastIPVSok)
		}
	}
	c.figure("switch → kube-proxy's IPVS state gone, its nftables table there", "%.1fs", nftFirst-kpStart)
	c.figure("switch → ClusterIP answering through nftables (GET in the guest)", "%.1fs (%d failed GETs before)", vipOK-kpStart, vipFails)
	c.figure("switch → LoadBalancer IP answering through nftables (GET from the segment)", "%.1fs (%d failed GETs before)", lbOK.Sub(sw.at).Seconds(), sw.lbFails)
	return sw
}

// expectNoAlarm checks what was seen during and after the switch: the
// guest's IPVS conditions never left False and are now IPVSNotInUse with no
// new Warning Event; the probe agent saw exactly one responder (the guest)
// at every sample and arping only the guest's MAC; the strict-ARP check
// does not apply.
func (c *cluster) expectNoAlarm(t *testing.T, sw switchRun, warn map[string]int, probeWarn [2]int) {
	// The one alarm that is true during a switch: kube-proxy's IPVS cleanup
	// flushed the table, and kube-proxy stayed unreachable (so the agent
	// still assumed IPVS, and reuses kube-proxy's answer for
	// kubeproxy.DefaultUseTTL after that, plus one resync) for longer than
	// the ipvs check's settle time: the empty table is then reported, as for
	// any IPVS node whose table stays empty that long. Under TCG on a busy
	// host that gap has measured 17–30 s; on real hardware it is about a
	// second.
	realOutage := sw.gap+kubeproxy.DefaultUseTTL+time.Second > ipvscheck.DefaultSettle
	tolerated := map[string]bool{}
	if realOutage {
		for _, r := range []string{ipvscheck.ReasonVirtualServerMissing, ipvscheck.ReasonNoRealServers} {
			tolerated[string(nodestatus.KubeProxyIPVSDegraded)+"/"+r] = true
		}
	}
	results := map[string]int{}
	starved, noReply := 0, 0
	for _, s := range sw.samples {
		for i, a := range s.alarms {
			// Unknown because kube-proxy's metrics port did not answer within
			// the client's 2 s: the agent says it could not check, which is
			// true of a kube-proxy starved of CPU during its cleanup under
			// TCG. Counted and shown, not an alarm.
			if s.reasons[i] == string(nodestatus.KubeProxyIPVSDegraded)+"/"+nodestatus.ReasonCheckFailed &&
				(strings.Contains(a, "Client.Timeout exceeded") || strings.Contains(a, "did not answer")) {
				starved++
				continue
			}
			if tolerated[s.reasons[i]] {
				t.Logf("NOTE: at %+.1fs from the switch, a true alarm: the IPVS table was empty for %.1fs before kube-proxy answered again (+ %s answer reuse + a resync > the %s settle time): %s",
					s.at.Sub(sw.at).Seconds(), sw.gap.Seconds(), kubeproxy.DefaultUseTTL, ipvscheck.DefaultSettle, a)
				continue
			}
			t.Errorf("guest IPVS condition not False at %+.1fs from the switch: %s", s.at.Sub(sw.at).Seconds(), a)
		}
		k := fmt.Sprintf("%s/%v", s.probeResult, s.responders)
		results[k]++
		switch {
		case s.probeResult == "answered" && s.responders == 1:
		case s.probeResult == "no-reply" && s.responders == 0:
			// A reply later than the prober's 1 s window: the guest's
			// speaker (user space) or the prober starved of CPU under TCG on
			// a busy host. Never a second responder; told, bounded below.
			noReply++
		default:
			t.Errorf("probe agent at %+.1fs from the switch: result %q with %v responders, want answered by exactly 1", s.at.Sub(sw.at).Seconds(), s.probeResult, s.responders)
		}
	}
	if noReply > 0 {
		t.Logf("NOTE: %d of %d probe samples across the switch saw no reply in the prober's window (a starved TCG guest or host; arping below must still see only the guest)", noReply, len(sw.samples))
		if noReply*10 > len(sw.samples) {
			t.Errorf("%d of %d probe samples saw no reply: more than 10%%", noReply, len(sw.samples))
		}
	}
	c.figure("probe agent samples across the switch (result/responders: count)", "%v", results)
	c.figure("guest samples with KubeProxyIPVSDegraded=Unknown: kube-proxy's port did not answer in 2s", "%d of %d", starved, len(sw.samples))
	t.Logf("arping %s across the switch: %d replies from %v (exit %d)", c.lbIP, len(sw.arping.RTTs), sw.arping.MACs, sw.arping.Exit)
	if !slices.Equal(sw.arping.MACs, []string{c.guest.tap.MAC}) {
		t.Errorf("arping across the switch saw %v, want exactly the guest's %s:\n%s", sw.arping.MACs, c.guest.tap.MAC, sw.arping.Output)
	}
	c.figure("arping across the switch: replies / requests, responders", "%d/25, %v", len(sw.arping.RTTs), sw.arping.MACs)
	if ok, why := c.ipvsConditionsOff(); !ok {
		t.Errorf("guest conditions after the switch: %s", why)
	}
	cd := c.condition(guestName, string(nodestatus.StrictARPDisabled))
	t.Logf("strict-ARP after the switch: StrictARPDisabled=%s (%s): %s", cd.Status, cd.Reason, cd.Message)
	for _, a := range ipvsConditions {
		if n := c.warnings(guestName, a) - warn[a]; n != 0 && (!realOutage || a != string(nodestatus.KubeProxyIPVSDegraded)) {
			t.Errorf("guest: %d new Warning Events for %s across the switch", n, a)
		}
	}
	other := c.warningsExcept(probeName, string(nodestatus.LoadBalancerARPFailing), arpcheck.ReasonNoReply)
	nr := c.warnings(probeName, string(nodestatus.LoadBalancerARPFailing)) - other
	if n := other - probeWarn[1]; n != 0 {
		t.Errorf("probe node: %d new Warning Events for LoadBalancerARPFailing (not ARPNoReply) across the switch", n)
	}
	// ARPNoReply Warnings only for the late replies told above.
	if n := nr - probeWarn[0]; n != 0 && noReply == 0 {
		t.Errorf("probe node: %d new ARPNoReply Warning Events across the switch, though no sample saw one", n)
	} else if n != 0 {
		t.Logf("NOTE: probe node: %d ARPNoReply Warning Event(s) for the late replies", n)
	}
	if a := c.arping(4, 6*time.Second); !slices.Equal(a.MACs, []string{c.guest.tap.MAC}) {
		t.Errorf("after the switch: arping saw %v, want exactly the guest's %s:\n%s", a.MACs, c.guest.tap.MAC, a.Output)
	}
	if ok, why := c.get(c.lbIP.String()); !ok {
		t.Errorf("after the switch: the LoadBalancer IP does not answer: %s", why)
	}
}

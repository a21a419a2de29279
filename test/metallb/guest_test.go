// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/guestvm"
	"github.com/ipvs-guard/ipvs-guard/internal/l2segment"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// guestName is the guest's Kubernetes Node name.
const guestName = "guest"

// guestNode is the QEMU guest on the segment: a real Debian kernel with the
// real kube-proxy in IPVS mode and an agent, one NIC on QEMU's user network
// (the API server at guestvm.HostAddr, as in the end-to-end tier) and one on
// a tap in the segment's bridge (its Node's InternalIP, where its kernel
// answers ARP or not, and where the test reaches its control endpoint and
// /metrics). The guest side is hack/metallb/guest-main.sh, then the
// end-to-end tier's node main and helpers (hack/e2e).
type guestNode struct {
	tap *l2segment.Tap
	dir string
	// ctl is the control endpoint on the segment.
	ctl *guestvm.Control
	// dev is the segment NIC's name in the guest.
	dev string
	// booted is closed when QEMU has ended; code is the guest's exit code.
	booted chan struct{}
	code   int
	err    error
	cancel context.CancelFunc
	// bootStart is when QEMU was started; up when the control endpoint answered.
	bootStart, up time.Time
}

// IP and MAC are the segment NIC's.
func (g *guestNode) IP() netip.Addr { return g.tap.IP }

// MAC returns the segment NIC's MAC.
func (g *guestNode) MAC() string { return g.tap.MAC }

// bootGuest starts the guest on a new tap of the segment in the background
// (its boot overlaps the rest of the setup); joinGuest finishes it.
func (c *cluster) bootGuest() {
	c.t.Helper()
	root := repoRoot(c.t)
	testenv.Tool(c.t, "QEMU", "qemu-system-x86_64", "hack/guest/lib.sh guest_prepare")
	kubeProxy := apiservertest.CachedBinary("kube-proxy")
	_, err := os.Stat(kubeProxy)
	testenv.Require(c.t, err == nil, "kube-proxy not built (hack/apiserver/install.sh kube-proxy)")
	tap, err := c.seg.AddTap(c.ctx, guestName)
	if err != nil {
		c.t.Fatal(err)
	}
	g := &guestNode{tap: tap, dir: filepath.Join(c.dir, "guest"), booted: make(chan struct{}),
		ctl: guestvm.NewControl("http://" + tap.IP.String() + ":8000")}
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	ms, err := guestvm.Manifests(root, []string{"hack/e2e/guest.manifest"}, nil, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	cache := cmp.Or(os.Getenv("IPVS_GUARD_CACHE"), filepath.Join(root, ".cache"))
	img, err := guestvm.Prepare(c.ctx, guestvm.PrepareOptions{RepoRoot: root, CacheDir: cache, Manifests: ms, Log: io.Discard})
	if err != nil {
		c.t.Fatalf("preparing the guest (hack/metallb/test.sh prepares it first): %v", err)
	}
	payload, err := guestvm.NewPayload(filepath.Join(g.dir, "payload"), filepath.Join(root, "hack/guest/init.sh"), filepath.Join(root, "hack/metallb/guest-main.sh"))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, f := range []struct {
		src, dst string
		mode     os.FileMode
	}{
		{filepath.Join(root, "hack/e2e/guest-main.sh"), "/guest/e2e-main.sh", 0o755},
		{filepath.Join(root, "hack/e2e/e2e-lib.sh"), "/guest/e2e-lib.sh", 0o644},
		{c.bin, "/usr/local/bin/ipvs-guard", 0o755},
		{kubeProxy, "/usr/local/bin/kube-proxy", 0o755},
	} {
		if err := payload.Add(f.src, f.dst, f.mode); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := payload.WriteEnv([]string{"CI=" + os.Getenv("CI"), "SEGMENT_MAC=" + tap.MAC,
		"SEGMENT_ADDR=" + netip.PrefixFrom(tap.IP, c.seg.Subnet.Bits()).String()}); err != nil {
		c.t.Fatal(err)
	}
	initrd := filepath.Join(g.dir, "initrd")
	if err := guestvm.Pack(c.ctx, img.Base, payload.Dir, initrd, false); err != nil {
		c.t.Fatal(err)
	}
	_ = os.RemoveAll(payload.Dir)
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.bootStart = time.Now()
	go func() {
		defer close(g.booted)
		g.code, g.err = guestvm.Boot(ctx, guestvm.BootOptions{
			Machine: guestvm.Machine{Kernel: img.Kernel, Initrd: initrd, Memory: "1536M", Net: true,
				Taps: []guestvm.TapNIC{{Ifname: tap.Ifname, MAC: tap.MAC}}},
			Console: filepath.Join(g.dir, "console.log"), Timeout: 30 * time.Minute,
		})
		_ = os.Remove(initrd)
	}()
	// Registered before the segment's Close runs (cleanups run last
	// first): the guest powers off cleanly, then its tap goes.
	c.t.Cleanup(g.stop)
	c.guest = g
}

// stop tells the guest the run is over (it stops kube-proxy and the agent
// and powers off), then ends QEMU if it is still there after 60 s.
func (g *guestNode) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _, _ = g.ctl.Exec(ctx, "echo 0 >/run/e2e/done")
	cancel()
	select {
	case <-g.booted:
	case <-time.After(60 * time.Second):
	}
	g.cancel()
	<-g.booted
}

// run runs script in the guest and fails the test unless it exits 0.
func (c *cluster) guestRun(script string) string {
	c.t.Helper()
	out, code, err := c.guest.ctl.Exec(c.ctx, script)
	if err != nil || code != 0 {
		c.t.Fatalf("guest: %q: exit %d, %v:\n%s", script, code, err, out)
	}
	return out
}

// waitGuest runs script in the guest every 200 ms until it exits 0.
func (c *cluster) waitGuest(what string, timeout time.Duration, script string) string {
	c.t.Helper()
	var out string
	c.waitFor(what, timeout, func() (bool, string) {
		o, code, err := c.guest.ctl.Exec(c.ctx, script)
		out = o
		return err == nil && code == 0, fmt.Sprintf("exit %d, %v: %s", code, err, o)
	})
	return out
}

// joinGuest waits for the booted guest, makes it node "guest": its Node
// object (InternalIP on the segment), the IPVS modules loaded and declared
// as a node's admin would, kube-proxy with strictARP, and the agent.
func (c *cluster) joinGuest() {
	c.t.Helper()
	g := c.guest
	ready := func() (bool, string) {
		select {
		case <-g.booted:
			return false, fmt.Sprintf("QEMU ended (exit %d, %v); console %s", g.code, g.err, filepath.Join(g.dir, "console.log"))
		default:
		}
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		out, code, err := g.ctl.Exec(ctx, "cat /run/e2e/segment-dev")
		if err != nil || code != 0 {
			return false, fmt.Sprint(err)
		}
		g.dev = strings.TrimSpace(out)
		return true, ""
	}
	c.waitFor("the guest's control endpoint answers on the segment", 10*time.Minute, func() (bool, string) {
		ok, why := ready()
		if !ok {
			time.Sleep(400 * time.Millisecond)
		}
		return ok, why
	})
	g.up = time.Now()
	c.createNode(guestName, g.IP())

	ca, err := os.ReadFile(c.srv.CAFile)
	if err != nil {
		c.t.Fatal(err)
	}
	u, err := url.Parse(c.srv.URL)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://" + guestvm.HostAddr + ":" + u.Port(), CertificateAuthorityData: ca, TLSServerName: "kubernetes"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: c.srv.AdminToken}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.guestRun(fmt.Sprintf("cat >/run/e2e/node.kubeconfig <<'EOF'\n%s\nEOF\n", kc))
	// The segment and the cluster are IPv4 only: with IPv6 off, kube-proxy
	// runs single-stack (it checks disable_ipv6), so one sync round runs
	// ipset and iptables-restore for one family, not two.
	c.guestRun(`/usr/libexec/kmod/modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack &&
printf 'ip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n' >/etc/modules-load.d/ipvs.conf &&
echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6`)
	c.startKubeProxy(true)
	c.waitGuest("kube-proxy sets strictARP's sysctls in the guest", 3*time.Minute, `[ "$(cat /proc/sys/net/ipv4/conf/all/arp_ignore)$(cat /proc/sys/net/ipv4/conf/all/arp_announce)" = 12 ]`)
	c.guestRun(`NODE_NAME=` + guestName + ` bg_start agent /usr/libexec/e2e/setpriv --bounding-set -all,+net_admin,+net_raw --inh-caps -all --no-new-privs -- ` +
		`/usr/local/bin/ipvs-guard run --kubeconfig=/run/e2e/node.kubeconfig --node-name=` + guestName +
		` --scheduler=rr --resync-period=` + resync + ` --no-uevents ` + c.peers.Flag() +
		fmt.Sprintf(" --metrics-bind-address=%s:%d", g.IP(), agentPort) + ` --health-probe-bind-address=127.0.0.1:9474`)
	c.t.Logf("guest node %s: %s (%s) on the segment as %s; QEMU start → control endpoint %.1fs, → kube-proxy and agent up %.1fs",
		guestName, g.IP(), g.MAC(), g.dev, g.up.Sub(g.bootStart).Seconds(), time.Since(g.bootStart).Seconds())
}

// startKubeProxy (re)starts the guest's kube-proxy in IPVS mode, with
// strictARP as asked. Under TCG one full sync round (ipset and
// iptables-restore runs) keeps the guest's only vCPU busy for 10–40 s on a
// busy host, and a busy guest answers ARP late (its vCPU thread waits for
// the host's CPU): a reply later than the probers' 1 s window is a missing
// responder. So the periodic resync is 10 min instead of 30 s; every
// Service or EndpointSlice change still syncs within --ipvs-min-sync-period
// (1 s), which is all the scenarios need.
func (c *cluster) startKubeProxy(strictARP bool) {
	c.t.Helper()
	c.guestRun(`kp_stop >/dev/null; kp_start --kubeconfig=/run/e2e/node.kubeconfig --proxy-mode=ipvs --ipvs-scheduler=rr --hostname-override=` + guestName +
		` --metrics-bind-address=127.0.0.1:10249 --ipvs-strict-arp=` + strconv.FormatBool(strictARP) + ` --ipvs-sync-period=10m --v=1`)
}

// guestWaitSynced waits until the guest's kube-proxy has finished a sync
// round and has none queued (its last sync is not older than its last
// queued one), after which the guest is idle again.
func (c *cluster) guestWaitSynced() {
	c.t.Helper()
	start := time.Now()
	c.waitGuest("the guest's kube-proxy has synced and has no sync queued", 3*time.Minute,
		`wget -qO- http://127.0.0.1:10249/metrics | awk '/^kubeproxy_sync_proxy_rules_last_timestamp_seconds/ {d = $NF + 0}
/^kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds/ {q = $NF + 0} END {exit !(d > 0 && d >= q)}'`)
	c.t.Logf("guest: kube-proxy synced, none queued (waited %.1fs)", time.Since(start).Seconds())
}

// guestSetStrictARP is what an operator does on a real node: kube-proxy
// restarted with --ipvs-strict-arp as asked. kube-proxy sets
// arp_ignore=1/arp_announce=2 at start when it is on and leaves them alone
// when it is off (a node's reboot then brings back the kernel's 0/0), so
// turning it off restarts kube-proxy, waits until its first sync round is
// over (a guest that busy answers ARP late), then puts 0/0 back. It returns
// when the guest's ARP behaviour changed: the sysctls written, or
// kube-proxy started.
func (c *cluster) guestSetStrictARP(on bool) time.Time {
	c.t.Helper()
	var changed time.Time
	if on {
		changed = time.Now()
	}
	c.startKubeProxy(on)
	c.waitGuest("the guest's kube-proxy serves /proxyMode", 3*time.Minute, `[ "$(wget -qO- http://127.0.0.1:10249/proxyMode)" = ipvs ]`)
	want := "12"
	if !on {
		c.guestWaitSynced()
		changed = time.Now()
		c.guestRun(`for k in arp_ignore arp_announce; do echo 0 >/proc/sys/net/ipv4/conf/all/$k; done`)
		want = "00"
	}
	c.waitGuest("the guest's arp_ignore/arp_announce are "+want, 3*time.Minute,
		`[ "$(cat /proc/sys/net/ipv4/conf/all/arp_ignore)$(cat /proc/sys/net/ipv4/conf/all/arp_announce)" = `+want+` ]`)
	return changed
}

// guestWaitVIP waits until the guest's kube-proxy has ip on kube-ipvs0 and
// a virtual server for it. Under TCG on a busy host one kube-proxy sync
// round (ipset and iptables-restore runs) takes many seconds, so this is
// timed and reported, and kept out of the product's own figures.
func (c *cluster) guestWaitVIP(ip netip.Addr) {
	c.t.Helper()
	c.guestRun(`kp_wait_table 180 ` + ip.String())
	if at, ok := c.assigned[ip]; ok {
		c.t.Logf("guest: kube-proxy has %s on kube-ipvs0 and its virtual server %.1fs after MetalLB assigned it", ip, time.Since(at).Seconds())
	}
}

// guestArping runs iputils arping in the guest on its segment NIC.
func (c *cluster) guestArping(ip netip.Addr, count int, deadline time.Duration) (l2segment.ArpingResult, error) {
	args := l2segment.ArpingArgs(c.guest.dev, ip, count, deadline)
	out, code, err := c.guest.ctl.Exec(c.ctx, strings.Join(args, " "))
	if err != nil {
		return l2segment.ArpingResult{}, err
	}
	return l2segment.ParseArping(out, code, ip)
}

// guestLogs returns the last lines of the guest's kube-proxy and agent logs.
func (c *cluster) guestLogs() string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, err := c.guest.ctl.Exec(ctx, `for f in kube-proxy agent; do echo "--- guest $f.log:"; tail -n 40 /run/e2e/$f.log; done`)
	if err != nil {
		return fmt.Sprintf("guest unreachable: %v; console %s", err, filepath.Join(c.guest.dir, "console.log"))
	}
	return out
}

// metric returns the value of the series of family name on node's agent
// whose labels include want (ok false when there is none).
func (c *cluster) metric(node, name string, want map[string]string) (float64, bool) {
	mfs, err := c.scrape(node)
	if err != nil {
		return 0, false
	}
next:
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if !hasLabels(got, want) {
			continue next
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// eventCount counts the agent's Events on node of type typ ("Warning",
// "Normal") for action (a condition type), any reason when reason is "".
func (c *cluster) eventCount(node, typ, action, reason string) int {
	list, err := c.kube.EventsV1().Events("").List(c.ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + node})
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.ReportingController == "ipvs-guard" && e.Type == typ && e.Action == action && (reason == "" || e.Reason == reason) {
			n++
		}
	}
	return n
}

// guestStrictARPOff is the guest's own scenario: its kube-proxy restarted
// with --ipvs-strict-arp=false (arp_ignore/arp_announce 0), so its real
// kernel answers ARP for the LoadBalancer IP kube-proxy bound to its real
// kube-ipvs0, besides the speaker that announces it. The other probers
// report a conflict naming the guest's MAC as the guest and the speaker's as
// its node; arping sees both. Then kube-proxy restarted with strictARP
// (which sets 1/2): the conflict clears with one Normal Event.
func (c *cluster) guestStrictARPOff(t *testing.T, ip netip.Addr, announcer string) {
	probers := c.shardProbers(ip, announcer)
	var victims []string // probers that hear the guest
	for _, p := range probers {
		if p != guestName {
			victims = append(victims, p)
		}
	}
	if len(victims) == 0 {
		t.Fatalf("no prober of %s besides the guest: %v", ip, probers)
	}
	warnings, normals := map[string]int{}, map[string]int{}
	for _, p := range victims {
		warnings[p] = c.eventCount(p, "Warning", "LoadBalancerARPFailing", "ARPConflict")
		normals[p] = c.eventCount(p, "Normal", "LoadBalancerARPFailing", "")
	}
	c.guestWaitVIP(ip)
	c.guestWaitSynced()
	c.waitFor("StrictARPDisabled=False on the guest, with the IP on its kube-ipvs0", waitLong, func() (bool, string) {
		cd := c.condition(guestName, "StrictARPDisabled")
		return cd.Status == corev1.ConditionFalse, string(cd.Status) + " " + cd.Message
	})
	sdWarn, sdNormal := c.eventCount(guestName, "Warning", "StrictARPDisabled", ""), c.eventCount(guestName, "Normal", "StrictARPDisabled", "")

	restart := time.Now()
	fault := c.guestSetStrictARP(false)
	t.Logf("guest: kube-proxy restarted with --ipvs-strict-arp=false and synced after %.1fs, then arp_ignore=0 arp_announce=0; kube-ipvs0: %s", fault.Sub(restart).Seconds(),
		strings.TrimSpace(c.guestRun(`ip -o -4 addr show dev kube-ipvs0 | grep -F "`+ip.String()+`/"`)))
	named := func(string) []string {
		return []string{c.mac(announcer) + " (" + announcer + ")", c.mac(guestName) + " (" + guestName + ")"}
	}
	d := c.expectFailing(victims, "ARPConflict", named, fault)
	c.figure("guest strictARP off (arp_ignore/arp_announce 0) → LoadBalancerARPFailing=True", "%.1fs", d.Seconds())
	c.waitFor("StrictARPDisabled=True on the guest", waitLong, func() (bool, string) {
		cd := c.condition(guestName, "StrictARPDisabled")
		return cd.Status == corev1.ConditionTrue, string(cd.Status) + " " + cd.Reason + ": " + cd.Message
	})
	sd := c.condition(guestName, "StrictARPDisabled")
	t.Logf("guest: StrictARPDisabled=True %s: %s", sd.Reason, sd.Message)
	both := []string{c.mac(announcer), c.mac(guestName)}
	slices.Sort(both)
	c.expectArping(t, ip, probers, func(p string) []string {
		if p == guestName { // a node never hears its own reply
			return []string{c.mac(announcer)}
		}
		return both
	})
	for _, p := range victims {
		if r, n := c.arpResult(p, ip), c.arpResponders(p, ip); r != "conflict" || n != 2 {
			t.Errorf("node %s: /metrics says %s with %v responders for %s, want conflict with 2", p, r, n, ip)
		}
	}
	if v, ok := c.metric(guestName, "ipvs_guard_node_condition_status", map[string]string{"condition": "StrictARPDisabled", "status": "True"}); !ok || v != 1 {
		t.Errorf("guest: ipvs_guard_node_condition_status{condition=StrictARPDisabled,status=True} = %v (present %v), want 1", v, ok)
	}

	fix := c.guestSetStrictARP(true)
	t.Logf("guest: kube-proxy restarted with --ipvs-strict-arp=true: arp_ignore=1 arp_announce=2 after %.1fs", time.Since(fix).Seconds())
	c.expectAnswered(t, ip, announcer)
	c.figure("guest strictARP back on (kube-proxy restart) → LoadBalancerARPFailing=False", "%.1fs", time.Since(fix).Seconds())
	c.guestWaitSynced()
	c.waitFor("StrictARPDisabled=False on the guest", waitLong, func() (bool, string) {
		cd := c.condition(guestName, "StrictARPDisabled")
		return cd.Status == corev1.ConditionFalse, string(cd.Status) + " " + cd.Message
	})
	// Events are written once per transition, asynchronously: give the
	// last one a moment, then count exactly.
	c.waitFor("one Normal Event per transition back", 30*time.Second, func() (bool, string) {
		for _, p := range victims {
			if got := c.eventCount(p, "Normal", "LoadBalancerARPFailing", "") - normals[p]; got < 1 {
				return false, p + ": no Normal LoadBalancerARPFailing Event yet"
			}
		}
		if c.eventCount(guestName, "Normal", "StrictARPDisabled", "")-sdNormal < 1 {
			return false, "guest: no Normal StrictARPDisabled Event yet"
		}
		return true, ""
	})
	time.Sleep(2 * time.Second)
	for _, p := range victims {
		if w, n := c.eventCount(p, "Warning", "LoadBalancerARPFailing", "ARPConflict")-warnings[p], c.eventCount(p, "Normal", "LoadBalancerARPFailing", "")-normals[p]; w != 1 || n != 1 {
			t.Errorf("node %s: %d Warning ARPConflict and %d Normal LoadBalancerARPFailing Events for the guest's conflict, want 1 and 1", p, w, n)
		}
	}
	if w, n := c.eventCount(guestName, "Warning", "StrictARPDisabled", "")-sdWarn, c.eventCount(guestName, "Normal", "StrictARPDisabled", "")-sdNormal; w != 1 || n != 1 {
		t.Errorf("guest: %d Warning and %d Normal StrictARPDisabled Events, want 1 and 1", w, n)
	}
	if v, ok := c.metric(guestName, "ipvs_guard_node_condition_status", map[string]string{"condition": "StrictARPDisabled", "status": "False"}); !ok || v != 1 {
		t.Errorf("guest: ipvs_guard_node_condition_status{condition=StrictARPDisabled,status=False} = %v (present %v), want 1", v, ok)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build migrate && linux

package migrate

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/guestvm"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/l2segment"
	"github.com/ipvs-guard/ipvs-guard/internal/metallbtest"
	"github.com/ipvs-guard/ipvs-guard/internal/proc"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
)

const (
	// guestName is the QEMU guest's Node name; probeName the namespace node's.
	guestName = "guest"
	probeName = "probe"
	// agentPort is where each agent serves /metrics on its segment address.
	agentPort = 9473
	// resync is the agents' --resync-period.
	resync = "1s"
	// svcName is the Service: type LoadBalancer, ClusterIP clusterIP, port
	// 80 to the guest's backend on 8080.
	svcName   = "web"
	clusterIP = "10.96.0.80"
	// foreignVS is a virtual server that is not kube-proxy's.
	foreignVS = "10.96.99.99"
	// waitLong bounds each wait for a component to react.
	waitLong = 3 * time.Minute
)

// cluster is one run: API server, segment, MetalLB's controller, the probe
// node and the guest.
type cluster struct {
	t     testing.TB
	ctx   context.Context
	dir   string
	root  string
	srv   *apiservertest.Server
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	seg   *l2segment.Segment
	mlb   *metallbtest.MetalLB
	probe *l2segment.Node
	agent *proc.Process
	bin   string
	guest *guestNode
	lbIP  netip.Addr
	figs  []figure
	// stepName is the step under way, named when the run fails.
	stepName string
	stepAt   time.Time
	// failedStep is the first step the test was failed in.
	failedStep string
}

// step starts a named step of the story.
func (c *cluster) step(name string) {
	if c.stepName != "" {
		c.t.Logf("=== step done in %.1fs: %s", time.Since(c.stepAt).Seconds(), c.stepName)
	}
	if c.t.Failed() && c.failedStep == "" {
		c.failedStep = c.stepName
	}
	c.stepName, c.stepAt = name, time.Now()
	c.t.Logf("=== step: %s", name)
}

type figure struct{ name, value string }

// figure records a figure and logs it at once.
func (c *cluster) figure(name, format string, args ...any) {
	c.figs = append(c.figs, figure{name, fmt.Sprintf(format, args...)})
	c.t.Logf("FIGURE %s: %s", name, fmt.Sprintf(format, args...))
}

func (c *cluster) printFigures() {
	var b strings.Builder
	fmt.Fprintf(&b, "migration figures (agents resync every %s; guest under QEMU TCG):\n", resync)
	for _, f := range c.figs {
		fmt.Fprintf(&b, "  %-62s %s\n", f.name, f.value)
	}
	c.t.Log(b.String())
}

func repoRoot(t testing.TB) string {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("finding the repository: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// guestNode is the QEMU guest: QEMU's user network for the API server
// (guestvm.HostAddr), a tap NIC on the segment for everything else.
type guestNode struct {
	tap    *l2segment.Tap
	dir    string
	ctl    *guestvm.Control
	dev    string
	booted chan struct{}
	code   int
	err    error
	cancel context.CancelFunc
	start  time.Time
}

// newCluster starts the guest's boot, the API server, the segment with the
// probe node, and MetalLB's CRDs, pool, L2Advertisement and controller.
func newCluster(t testing.TB, ctx context.Context) *cluster {
	testenv.RequireRoot(t)
	testenv.Require(t, l2segment.Check() == nil, fmt.Sprint(l2segment.Check()))
	root := repoRoot(t)
	paths := metallbtest.DefaultPaths(root)
	testenv.Require(t, paths.Check() == nil, fmt.Sprint(paths.Check()))
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "util-linux setpriv needed (hack/migrate/test.sh installs it)")
	testenv.Tool(t, "BUSYBOX", "busybox", "hack/guest/lib.sh guest_prepare")
	testenv.Tool(t, "ARPING", "arping", "hack/guest/lib.sh guest_prepare")

	c := &cluster{t: t, ctx: ctx, dir: t.TempDir(), root: root}
	c.bin = ipvsguardtest.Binary(t)
	if c.seg, err = l2segment.New(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.seg.Close)
	c.bootGuest(paths.Speaker)

	c.srv = apiservertest.Start(t, apiservertest.Options{ExtraFlags: []string{"--bind-address=0.0.0.0"}})
	if c.kube, err = kubernetes.NewForConfig(c.srv.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(c.srv.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	if c.probe, err = c.seg.AddNode(ctx, probeName); err != nil {
		t.Fatal(err)
	}
	c.createNode(probeName, c.probe.IP)

	sub := c.seg.Subnet.Addr().As4()
	first := netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], 200})
	last := netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], 210})
	port := c.srv.URL[strings.LastIndex(c.srv.URL, ":")+1:]
	c.mlb = &metallbtest.MetalLB{Paths: paths, Dir: c.dir, Kube: c.kube, Dyn: c.dyn,
		HostKubeconfig: c.srv.Kubeconfig, NodeKubeconfig: filepath.Join(c.dir, "node.kubeconfig")}
	if err := metallbtest.WriteKubeconfig(c.mlb.NodeKubeconfig, "https://"+c.seg.HostIP.String()+":"+port, c.srv.CAFile, c.srv.AdminToken, "kubernetes"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.mlb.Close)
	if err := metallbtest.Install(ctx, c.srv, paths, c.kube, c.dyn, first.String()+"-"+last.String()); err != nil {
		t.Fatal(err)
	}
	if err := metallbtest.ApplyL2Advertisement(ctx, c.dyn, "l2", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.mlb.StartController(ctx, freePort(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.agent != nil {
			c.agent.Stop(5 * time.Second)
		}
		if t.Failed() {
			c.dumpLogs()
			t.Logf("FAILED in step %q", cmp.Or(c.failedStep, c.stepName))
		}
	})
	return c
}

func freePort(t testing.TB) int {
	t.Helper()
	ports, err := apiservertest.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// bootGuest starts the guest on a new tap of the segment in the
// background; joinGuest waits for it. Its image is the end-to-end tier's
// (kube-proxy's iptables, ipset, netfilter modules) plus
// hack/migrate/guest.manifest (nft); the payload adds kube-proxy, MetalLB's
// speaker, ipvs-guard and the tiers' guest scripts.
func (c *cluster) bootGuest(speaker string) {
	c.t.Helper()
	testenv.Tool(c.t, "QEMU", "qemu-system-x86_64", "hack/guest/lib.sh guest_prepare")
	kubeProxy := apiservertest.CachedBinary("kube-proxy")
	_, err := os.Stat(kubeProxy)
	testenv.Require(c.t, err == nil, "kube-proxy not built (hack/apiserver/install.sh kube-proxy)")
	tap, err := c.seg.AddTap(c.ctx, guestName)
	if err != nil {
		c.t.Fatal(err)
	}
	cache := cmp.Or(os.Getenv("IPVS_GUARD_CACHE"), filepath.Join(c.root, ".cache"))
	// The last run's console and guest logs stay here (LogDir).
	g := &guestNode{tap: tap, dir: LogDir(cache), booted: make(chan struct{}),
		ctl: guestvm.NewControl("http://" + tap.IP.String() + ":8000")}
	_ = os.RemoveAll(g.dir)
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	ms, err := guestvm.Manifests(c.root, []string{"hack/e2e/guest.manifest", "hack/migrate/guest.manifest"}, nil, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	img, err := guestvm.Prepare(c.ctx, guestvm.PrepareOptions{RepoRoot: c.root, CacheDir: cache, Manifests: ms, Log: io.Discard})
	if err != nil {
		c.t.Fatalf("preparing the guest (hack/migrate/test.sh prepares it first): %v", err)
	}
	payload, err := guestvm.NewPayload(filepath.Join(g.dir, "payload"), filepath.Join(c.root, "hack/guest/init.sh"), filepath.Join(c.root, "hack/metallb/guest-main.sh"))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, f := range []struct {
		src, dst string
		mode     os.FileMode
	}{
		{filepath.Join(c.root, "hack/e2e/guest-main.sh"), "/guest/e2e-main.sh", 0o755},
		{filepath.Join(c.root, "hack/e2e/e2e-lib.sh"), "/guest/e2e-lib.sh", 0o644},
		{filepath.Join(c.root, "hack/migrate/migrate-lib.sh"), "/guest/migrate-lib.sh", 0o644},
		{c.bin, "/usr/local/bin/ipvs-guard", 0o755},
		{kubeProxy, "/usr/local/bin/kube-proxy", 0o755},
		{speaker, "/usr/local/bin/speaker", 0o755},
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
	g.start = time.Now()
	go func() {
		defer close(g.booted)
		g.code, g.err = guestvm.Boot(ctx, guestvm.BootOptions{
			// Two vCPUs: MetalLB's speaker answers ARP from user space, and
			// with one vCPU kube-proxy's cleanup at the switch (under TCG,
			// many seconds of iptables-restore and ipset runs) starves it
			// past the probers' 1 s window.
			Machine: guestvm.Machine{Kernel: img.Kernel, Initrd: initrd, Memory: cmp.Or(os.Getenv("GUEST_MEMORY"), "1536M"), CPUs: 2, Net: true,
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

// LogDir is where a run keeps the guest's console and the logs of its
// kube-proxy, agent and speaker, under the cache directory.
func LogDir(cache string) string { return filepath.Join(cache, "guest", "runs", "migrate-last") }

// stop copies the guest's logs into its directory, tells the guest the run
// is over (it stops what it started and powers off), then ends QEMU if it
// is still there after 60 s.
func (g *guestNode) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	for _, name := range []string{"kube-proxy", "agent", "speaker", "vip-poll"} {
		if out, code, err := g.ctl.Exec(ctx, "cat /run/e2e/"+name+".log"); err == nil && code == 0 {
			_ = os.WriteFile(filepath.Join(g.dir, name+".log"), []byte(out), 0o644)
		}
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	_, _, _ = g.ctl.Exec(ctx, `bg_running speaker && bg_stop speaker 5; bg_running backend && bg_stop backend 2; echo 0 >/run/e2e/done`)
	cancel()
	select {
	case <-g.booted:
	case <-time.After(60 * time.Second):
	}
	g.cancel()
	<-g.booted
}

// guestRun runs script in the guest (with hack/migrate/migrate-lib.sh
// sourced) and fails the test unless it exits 0.
func (c *cluster) guestRun(script string) string {
	c.t.Helper()
	out, code, err := c.guest.ctl.Exec(c.ctx, ". /guest/migrate-lib.sh\n"+script)
	if err != nil || code != 0 {
		c.t.Fatalf("guest: %q: exit %d, %v:\n%s", script, code, err, out)
	}
	return out
}

// guestTry runs script in the guest and returns its output and exit code
// (-1 when the endpoint failed).
func (c *cluster) guestTry(script string) (string, int) {
	out, code, err := c.guest.ctl.Exec(c.ctx, ". /guest/migrate-lib.sh\n"+script)
	if err != nil {
		return err.Error(), -1
	}
	return out, code
}

// waitGuest runs script in the guest every 200 ms until it exits 0.
func (c *cluster) waitGuest(what string, timeout time.Duration, script string) string {
	c.t.Helper()
	var out string
	c.waitFor(what, timeout, func() (bool, string) {
		o, code := c.guestTry(script)
		out = o
		return code == 0, fmt.Sprintf("exit %d: %s", code, o)
	})
	return out
}

// guestUptime returns the guest's clock (seconds since boot) and the host
// time it corresponds to (the middle of the request).
func (c *cluster) guestUptime() (float64, time.Time) {
	c.t.Helper()
	t0 := time.Now()
	out := c.guestRun("uptime_s")
	t1 := time.Now()
	var up float64
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "%f", &up); err != nil {
		c.t.Fatalf("guest uptime %q: %v", out, err)
	}
	return up, t0.Add(t1.Sub(t0) / 2)
}

// joinGuest waits for the guest's control endpoint, creates its Node
// (InternalIP on the segment), writes its kubeconfig (the API server over
// QEMU's user network), loads and declares the IPVS modules as a node's
// admin would, loads nf_tables' modules (for the switch), switches IPv6
// off (an IPv4-only node: kube-proxy runs single-stack) and starts the
// backend.
func (c *cluster) joinGuest() {
	c.t.Helper()
	g := c.guest
	c.waitFor("the guest's control endpoint answers on the segment", 10*time.Minute, func() (bool, string) {
		select {
		case <-g.booted:
			return false, fmt.Sprintf("QEMU ended (exit %d, %v); console %s", g.code, g.err, filepath.Join(g.dir, "console.log"))
		default:
		}
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		out, code, err := g.ctl.Exec(ctx, "cat /run/e2e/segment-dev")
		if err != nil || code != 0 {
			time.Sleep(400 * time.Millisecond)
			return false, fmt.Sprint(err)
		}
		g.dev = strings.TrimSpace(out)
		return true, ""
	})
	c.figure("setup: QEMU start → guest control endpoint", "%.1fs", time.Since(g.start).Seconds())
	c.createNode(guestName, g.tap.IP)
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
	c.guestRun(`/usr/libexec/kmod/modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack &&
printf 'ip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n' >/etc/modules-load.d/ipvs.conf &&
echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6 && nft_modules_load && backend_start`)
}

// startSpeaker starts MetalLB's speaker in the guest (root, as MetalLB's
// DaemonSet runs it with the host's network), its Pod object written as the
// DaemonSet would.
func (c *cluster) startSpeaker() {
	c.t.Helper()
	args, err := c.mlb.SpeakerArgs(c.ctx, guestName, c.guest.tap.IP)
	if err != nil {
		c.t.Fatal(err)
	}
	c.guestRun(`KUBECONFIG=/run/e2e/node.kubeconfig bg_start speaker /usr/local/bin/speaker ` + strings.Join(args, " "))
}

// startAgents starts `ipvs-guard run` on the guest (the DaemonSet's
// capabilities through util-linux setpriv, report-only) and on the probe
// node (its namespace, a copy of the captured Ubuntu 24.04 host tree as
// --root: this host's kernel has no modules). Without --peers-service each
// probes every LoadBalancer IP it does not announce: the probe node probes
// the guest's.
func (c *cluster) startAgents() {
	c.t.Helper()
	c.guestRun(`NODE_NAME=` + guestName + ` bg_start agent /usr/libexec/e2e/setpriv --bounding-set -all,+net_admin,+net_raw --inh-caps -all --no-new-privs -- ` +
		`/usr/local/bin/ipvs-guard run --kubeconfig=/run/e2e/node.kubeconfig --node-name=` + guestName +
		` --scheduler=rr --resync-period=` + resync + ` --no-uevents` +
		fmt.Sprintf(" --metrics-bind-address=%s:%d", c.guest.tap.IP, agentPort) + ` --metrics-secure=false --health-probe-bind-address=127.0.0.1:9474`)
	tree := c.hostTree()
	cmd := c.probe.Command(c.ctx, "setpriv", "--bounding-set=-all,+net_admin,+net_raw", "--inh-caps=-all,+net_admin,+net_raw",
		"--ambient-caps=-all,+net_admin,+net_raw", "--no-new-privs", "--",
		c.bin, "run", "--kubeconfig="+c.mlb.NodeKubeconfig, "--node-name="+probeName, "--root="+tree,
		"--scheduler=rr", "--resync-period="+resync, "--no-uevents",
		fmt.Sprintf("--metrics-bind-address=%s:%d", c.probe.IP, agentPort), "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:9474")
	p, err := proc.Start("ipvs-guard-"+probeName, cmd, filepath.Join(c.dir, "agent-"+probeName+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.agent = p
}

// hostTree makes the probe agent's --root: the captured Ubuntu 24.04 host
// tree with the live /proc/sys/net bind-mounted in (it shows the reading
// process's own network namespace).
func (c *cluster) hostTree() string {
	c.t.Helper()
	dst := filepath.Join(c.dir, "root-"+probeName)
	cp := exec.Command("cp", "-a", filepath.Join(c.root, "pkg/modules/testdata/ubuntu2404"), dst)
	if out, err := cp.CombinedOutput(); err != nil {
		c.t.Fatalf("copying the host tree: %v\n%s", err, out)
	}
	netDir := filepath.Join(dst, "proc/sys/net")
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := syscall.Mount("/proc/sys/net", netDir, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		c.t.Fatalf("bind-mounting /proc/sys/net into the host tree: %v", err)
	}
	c.t.Cleanup(func() { _ = syscall.Unmount(netDir, syscall.MNT_DETACH) })
	return dst
}

// createNode creates a Ready Node with the node's address, as kubelet would.
func (c *cluster) createNode(name string, ip netip.Addr) {
	c.t.Helper()
	node, err := c.kube.CoreV1().Nodes().Create(c.ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name}}
	if _, err := c.kube.CoreV1().Nodes().UpdateStatus(c.ctx, node, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// service creates the LoadBalancer Service (ClusterIP clusterIP) with one
// ready endpoint, the guest's backend on its segment address, and waits for
// MetalLB's controller to assign its IP.
func (c *cluster) service() {
	c.t.Helper()
	_, err := c.kube.CoreV1().Services("default").Create(c.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeLoadBalancer,
			ClusterIP: clusterIP,
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	ready := true
	port, proto, pname, node := int32(8080), corev1.ProtocolTCP, "http", guestName
	_, err = c.kube.DiscoveryV1().EndpointSlices("default").Create(c.ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svcName + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{c.guest.tap.IP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node,
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("MetalLB's controller assigns "+svcName+" an IP", time.Minute, func() (bool, string) {
		s, err := c.kube.CoreV1().Services("default").Get(c.ctx, svcName, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, fmt.Sprint(err)
		}
		c.lbIP, err = netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		return err == nil, fmt.Sprint(err)
	})
}

// l2Status returns the node MetalLB's ServiceL2Status names for the Service.
func (c *cluster) l2Status() string {
	list, err := c.dyn.Resource(clusterview.ServiceL2StatusGVR).Namespace(metallbtest.Namespace).List(c.ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, o := range list.Items {
		name, _, _ := unstructured.NestedString(o.Object, "status", "serviceName")
		node, _, _ := unstructured.NestedString(o.Object, "status", "node")
		if name == svcName {
			return node
		}
	}
	return ""
}

// condition returns one of a Node's conditions (zero when absent).
func (c *cluster) condition(node, typ string) corev1.NodeCondition {
	n, err := c.kube.CoreV1().Nodes().Get(c.ctx, node, metav1.GetOptions{})
	if err != nil {
		return corev1.NodeCondition{Reason: err.Error()}
	}
	for _, cond := range n.Status.Conditions {
		if string(cond.Type) == typ {
			return cond
		}
	}
	return corev1.NodeCondition{}
}

// waitFor polls fn every 100 ms until it returns true, failing after
// timeout with fn's last explanation; it returns how long it waited.
func (c *cluster) waitFor(what string, timeout time.Duration, fn func() (bool, string)) time.Duration {
	c.t.Helper()
	return ipvsguardtest.WaitFor(c.ctx, c.t, what, timeout, fn)
}

// scrape reads an agent's /metrics.
func (c *cluster) scrape(ip netip.Addr) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	return ipvsguardtest.Scrape(ctx, fmt.Sprintf("http://%s:%d/metrics", ip, agentPort))
}

// probeARP returns what the probe node's agent publishes for the
// LoadBalancer IP: the result whose ipvs_guard_arp_probe_result series is 1
// ("" when none) and ipvs_guard_arp_responders (-1 when absent).
func (c *cluster) probeARP() (string, float64) {
	mfs, err := c.scrape(c.probe.IP)
	if err != nil {
		return "unreadable: " + err.Error(), -1
	}
	result, responders := "", -1.0
	for _, m := range mfs["ipvs_guard_arp_probe_result"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["ip"] == c.lbIP.String() && m.GetGauge().GetValue() == 1 {
			result = labels["result"]
		}
	}
	for _, m := range mfs["ipvs_guard_arp_responders"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "ip" && l.GetValue() == c.lbIP.String() {
				responders = m.GetGauge().GetValue()
			}
		}
	}
	return result, responders
}

// warnings counts the agent's Warning Events on node for action (a
// condition type).
func (c *cluster) warnings(node, action string) int {
	return c.warningsExcept(node, action, "")
}

// warningsExcept counts them, leaving out those with reason except.
func (c *cluster) warningsExcept(node, action, except string) int {
	list, err := c.kube.EventsV1().Events("").List(c.ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + node})
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.ReportingController == "ipvs-guard" && e.Type == "Warning" && e.Action == action && (except == "" || e.Reason != except) {
			n++
		}
	}
	return n
}

// arping runs iputils arping for the LoadBalancer IP from the probe node.
func (c *cluster) arping(count int, deadline time.Duration) l2segment.ArpingResult {
	c.t.Helper()
	r, err := c.probe.Arping(c.ctx, c.lbIP, count, deadline)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// get fetches http://<ip>/ from the probe node's namespace (busybox wget,
// 2 s) and reports whether the guest's backend answered.
func (c *cluster) get(ip string) (bool, string) {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	out, err := c.probe.Command(ctx, "timeout", "2", "busybox", "wget", "-qO-", "http://"+ip+"/").CombinedOutput()
	return err == nil && strings.HasPrefix(string(out), "backend guest"), strings.TrimSpace(string(out)) + fmt.Sprint(" ", err)
}

func (c *cluster) dumpLogs() {
	for _, p := range []*proc.Process{c.mlb.Controller, c.agent} {
		if p != nil {
			c.t.Logf("--- last log lines of %s:\n%s", p.Name, p.Tail(3000))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, err := c.guest.ctl.Exec(ctx, `for f in kube-proxy agent speaker; do echo "--- guest $f.log:"; tail -n 40 /run/e2e/$f.log; done`)
	if err != nil {
		out = fmt.Sprintf("guest unreachable: %v; console %s", err, filepath.Join(c.guest.dir, "console.log"))
	}
	c.t.Logf("%s", out)
}

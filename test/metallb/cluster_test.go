// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/alerttest"
	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/l2segment"
	"github.com/ipvs-guard/ipvs-guard/internal/metallbtest"
	"github.com/ipvs-guard/ipvs-guard/internal/peerstest"
	"github.com/ipvs-guard/ipvs-guard/internal/proc"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// agentPort is where each agent serves /metrics on its node's eth0 address.
const agentPort = 9473

// metallbStateTTL is the agents' --metallb-state-ttl: each scenario's
// cause is read afresh within it.
const metallbStateTTL = "2s"

// resync is the agents' --resync-period: ARP replies have no watch, so this
// is how often an agent re-probes.
const resync = "1s"

// cluster is one run: API server, segment, MetalLB, agents.
type cluster struct {
	t     testing.TB
	ctx   context.Context
	dir   string
	srv   *apiservertest.Server
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	seg   *l2segment.Segment
	mlb   *metallbtest.MetalLB
	nodes map[string]*l2segment.Node
	order []string
	// agents by node name, and each agent's --root tree.
	agents map[string]*proc.Process
	trees  map[string]string
	bin    string
	// pool is the IPAddressPool's range.
	poolFirst netip.Addr
	alerts    *alerttest.Stack
	figs      []figure
	// guest is the QEMU node on the segment (nil without one); it is
	// last in order.
	guest *guestNode
	// assigned is when MetalLB assigned each LoadBalancer IP.
	assigned map[netip.Addr]time.Time
	// peers is the agents' peers Service, listing every node as the chart's would.
	peers *peerstest.Peers
	// scrapeToken is Prometheus' ServiceAccount token (monitoring/prometheus,
	// bound to ipvs-guard-metrics-reader), in scrapeTokenFile too: the
	// agents serve /metrics over HTTPS to it only.
	scrapeToken, scrapeTokenFile string
}

func repoRoot(t testing.TB) string {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("finding the repository: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// newCluster starts everything but the Services: the API server (bound to
// every address so the nodes reach it over the bridge), the segment with
// nodes names, MetalLB with a speaker on each of speakerNodes, and an agent
// on every node.
func newCluster(t testing.TB, ctx context.Context, names, speakerNodes []string) *cluster {
	return newClusterGuest(t, ctx, names, speakerNodes, false)
}

// newClusterGuest is newCluster, plus, with withGuest, the QEMU guest as
// node "guest" (real kernel, real kube-proxy in IPVS mode, an agent, no
// speaker) on a tap of the bridge, booted while the rest starts.
func newClusterGuest(t testing.TB, ctx context.Context, names, speakerNodes []string, withGuest bool) *cluster {
	testenv.RequireRoot(t)
	testenv.Require(t, l2segment.Check() == nil, fmt.Sprint(l2segment.Check()))
	root := repoRoot(t)
	paths := metallbtest.DefaultPaths(root)
	testenv.Require(t, paths.Check() == nil, fmt.Sprint(paths.Check()))
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "util-linux setpriv needed")

	c := &cluster{t: t, ctx: ctx, dir: t.TempDir(), nodes: map[string]*l2segment.Node{}, agents: map[string]*proc.Process{}, trees: map[string]string{},
		assigned: map[netip.Addr]time.Time{}}
	c.bin = ipvsguardtest.Binary(t)

	if c.seg, err = l2segment.New(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.seg.Close)
	if withGuest {
		c.bootGuest()
	}

	c.srv = apiservertest.Start(t, apiservertest.Options{ExtraFlags: []string{"--bind-address=0.0.0.0"}})
	if c.kube, err = kubernetes.NewForConfig(c.srv.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(c.srv.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		node, err := c.seg.AddNode(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[n] = node
		c.order = append(c.order, n)
		c.createNode(n, node.IP)
	}
	// The pool: the top of the segment's /24, on-link for every node.
	sub := c.seg.Subnet.Addr().As4()
	c.poolFirst = netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], 200})
	last := netip.AddrFrom4([4]byte{sub[0], sub[1], sub[2], 220})

	port := c.srv.URL[strings.LastIndex(c.srv.URL, ":")+1:]
	c.mlb = &metallbtest.MetalLB{Paths: paths, Dir: c.dir, Kube: c.kube, Dyn: c.dyn,
		HostKubeconfig: c.srv.Kubeconfig, NodeKubeconfig: filepath.Join(c.dir, "node.kubeconfig")}
	if err := metallbtest.WriteKubeconfig(c.mlb.NodeKubeconfig, "https://"+c.seg.HostIP.String()+":"+port, c.srv.CAFile, c.srv.AdminToken, "kubernetes"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.mlb.Close)
	if err := metallbtest.Install(ctx, c.srv, paths, c.kube, c.dyn, c.poolFirst.String()+"-"+last.String()); err != nil {
		t.Fatal(err)
	}
	if err := metallbtest.ApplyL2Advertisement(ctx, c.dyn, "l2", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.mlb.StartController(ctx, freePort(t)); err != nil {
		t.Fatal(err)
	}
	for _, n := range speakerNodes {
		if err := c.mlb.StartSpeaker(ctx, c.nodes[n]); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		c.startAgent(n)
	}
	c.scrapeIdentity()
	t.Cleanup(func() {
		for _, a := range c.agents {
			a.Stop(5 * time.Second)
		}
		if t.Failed() {
			c.dumpLogs()
		}
	})
	if withGuest {
		join := time.Now()
		c.joinGuest()
		c.figure("guest: setup wait beyond the namespace nodes' (its boot overlaps theirs)", "%.1fs", time.Since(join).Seconds())
		c.order = append(c.order, guestName)
		// The guest's agent is a peer like the others, as the chart's
		// peers Service would list it once its pod is ready.
		if err := c.peers.Set(ctx, c.order, nil); err != nil {
			t.Fatal(err)
		}
		c.waitFor("every agent publishes its MACs on its Node", waitLong, func() (bool, string) {
			for _, n := range c.order {
				node, err := c.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				if err != nil || node.Annotations[nodestatus.MACsAnnotation] == "" {
					return false, fmt.Sprintf("node %s: no %s annotation (%v)", n, nodestatus.MACsAnnotation, err)
				}
			}
			return true, ""
		})
	}
	return c
}

// ip returns a node's address on the segment.
func (c *cluster) ip(node string) netip.Addr {
	if node == guestName && c.guest != nil {
		return c.guest.IP()
	}
	return c.nodes[node].IP
}

// mac returns the MAC of a node's NIC on the segment.
func (c *cluster) mac(node string) string {
	if node == guestName && c.guest != nil {
		return c.guest.MAC()
	}
	return c.nodes[node].MAC
}

// arping runs iputils arping for ip on the node's segment NIC (see
// l2segment.Node.Arping).
func (c *cluster) arping(node string, ip netip.Addr, count int, deadline time.Duration) (l2segment.ArpingResult, error) {
	if node == guestName && c.guest != nil {
		return c.guestArping(ip, count, deadline)
	}
	return c.nodes[node].Arping(c.ctx, ip, count, deadline)
}

// setStrictARP turns kube-proxy's strictARP on or off on a node: the
// sysctls it sets on a namespace node, kube-proxy restarted with
// --ipvs-strict-arp on the guest.
func (c *cluster) setStrictARP(node string, on bool) error {
	if node == guestName && c.guest != nil {
		_ = c.guestSetStrictARP(on)
		return nil
	}
	return c.nodes[node].SetStrictARP(c.ctx, on)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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

// hostTree makes the agent's --root: the captured Ubuntu 24.04 host tree
// (every IPVS module loaded and declared: the host kernel here has no
// modules), with the live /proc/sys/net bind-mounted in, which shows the
// reading process's own network namespace.
func (c *cluster) hostTree(name string) string {
	c.t.Helper()
	dst := filepath.Join(c.dir, "root-"+name)
	cp := exec.Command("cp", "-a", filepath.Join(repoRoot(c.t), "pkg/modules/testdata/ubuntu2404"), dst)
	if out, err := cp.CombinedOutput(); err != nil {
		c.t.Fatalf("copying the host tree: %v\n%s", err, out)
	}
	// A bind mount, not a symlink: the agent resolves every link under
	// --root inside the root, as the host would see it, so an absolute link
	// to /proc/sys/net would loop back into the tree.
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

// startAgent starts `ipvs-guard run` in the node's namespace with the
// DaemonSet's capabilities (NET_ADMIN, NET_RAW), report-only, with its
// peers from a peers Service that lists every node of the segment (an agent
// runs on each), as the chart's DaemonSet and the EndpointSlice controller
// would give them.
func (c *cluster) startAgent(name string) {
	c.t.Helper()
	n := c.nodes[name]
	if c.peers == nil {
		var err error
		if c.peers, err = peerstest.Publish(c.ctx, c.kube, types.NamespacedName{Namespace: "ipvs-guard", Name: "ipvs-guard-peers"}, c.order); err != nil {
			c.t.Fatal(err)
		}
	}
	if c.trees[name] == "" {
		c.trees[name] = c.hostTree(name)
	}
	cmd := n.Command(c.ctx, "setpriv", "--bounding-set=-all,+net_admin,+net_raw", "--inh-caps=-all,+net_admin,+net_raw",
		"--ambient-caps=-all,+net_admin,+net_raw", "--no-new-privs", "--",
		c.bin, "run", "--kubeconfig="+c.mlb.NodeKubeconfig, "--node-name="+name, "--root="+c.trees[name],
		"--scheduler=rr", "--resync-period="+resync, "--no-uevents", c.peers.Flag(), "--metallb-state-ttl="+metallbStateTTL,
		fmt.Sprintf("--metrics-bind-address=%s:%d", n.IP, agentPort), "--health-probe-bind-address=127.0.0.1:9474")
	p, err := proc.Start("ipvs-guard-"+name, cmd, filepath.Join(c.dir, "agent-"+name+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.agents[name] = p
}

func (c *cluster) dumpLogs() {
	procs := []*proc.Process{c.mlb.Controller}
	if c.alerts != nil {
		procs = append(procs, c.alerts.Prometheus, c.alerts.Alertmanager)
	}
	for _, n := range c.order {
		procs = append(procs, c.mlb.Speakers[n], c.agents[n])
	}
	for _, p := range procs {
		if p != nil {
			c.t.Logf("--- last log lines of %s:\n%s", p.Name, p.Tail(3000))
		}
	}
	if c.guest != nil {
		c.t.Logf("%s", c.guestLogs())
	}
}

// service creates a LoadBalancer Service with one ready endpoint on
// endpointNode, and waits for MetalLB's controller to assign its IP, which
// it then puts on every namespace node's kube-ipvs0 as kube-proxy would;
// on the guest the real kube-proxy does it (guestWaitVIP).
func (c *cluster) service(name string, etp corev1.ServiceExternalTrafficPolicy, endpointNode string) netip.Addr {
	c.t.Helper()
	_, err := c.kube.CoreV1().Services("default").Create(c.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: etp,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	ready := true
	port, proto := int32(8080), corev1.ProtocolTCP
	pname := "http"
	_, err = c.kube.DiscoveryV1().EndpointSlices("default").Create(c.ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.9.10"},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &endpointNode,
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	var ip netip.Addr
	c.waitFor("MetalLB's controller assigns "+name+" an IP", time.Minute, func() (bool, string) {
		s, err := c.kube.CoreV1().Services("default").Get(c.ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, fmt.Sprint(err)
		}
		ip, err = netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		return err == nil, fmt.Sprint(err)
	})
	for _, n := range c.order {
		if n == guestName && c.guest != nil {
			// kube-proxy's business; the guest's scenarios wait for it.
			c.assigned[ip] = time.Now()
			continue
		}
		if err := c.nodes[n].AddVIP(c.ctx, ip); err != nil {
			c.t.Fatal(err)
		}
	}
	return ip
}

// deleteService deletes a Service, its EndpointSlice and its VIPs.
func (c *cluster) deleteService(name string, ip netip.Addr) {
	c.t.Helper()
	if err := c.kube.CoreV1().Services("default").Delete(c.ctx, name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	if err := c.kube.DiscoveryV1().EndpointSlices("default").Delete(c.ctx, name+"-1", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
	for _, n := range c.order {
		if n != guestName || c.guest == nil { // kube-proxy's business on the guest
			_ = c.nodes[n].DelVIP(c.ctx, ip)
		}
	}
}

// l2Status returns the node MetalLB's ServiceL2Status names for a Service ("" when none).
func (c *cluster) l2Status(svc string) string {
	list, err := c.dyn.Resource(clusterview.ServiceL2StatusGVR).Namespace(metallbtest.Namespace).List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, o := range list.Items {
		name, _, _ := unstructured.NestedString(o.Object, "status", "serviceName")
		node, _, _ := unstructured.NestedString(o.Object, "status", "node")
		if name == svc {
			return node
		}
	}
	return ""
}

// condition returns one of a Node's conditions.
func (c *cluster) condition(node, typ string) corev1.NodeCondition {
	n, err := c.kube.CoreV1().Nodes().Get(c.ctx, node, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
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

// scrapeIdentity applies the shipped RBAC (deploy/rbac: the agent's
// rules and the ClusterRole ipvs-guard-metrics-reader) and gives
// Prometheus its identity as an operator would: ServiceAccount
// monitoring/prometheus bound to ipvs-guard-metrics-reader, and its token.
func (c *cluster) scrapeIdentity() {
	c.t.Helper()
	rbac := filepath.Join(repoRoot(c.t), "deploy", "rbac")
	if err := c.srv.Apply(c.ctx, filepath.Join(rbac, "serviceaccount.yaml"), filepath.Join(rbac, "rbac.yaml")); err != nil {
		c.t.Fatal(err)
	}
	c.scrapeToken = c.serviceAccountToken("monitoring", "prometheus")
	if _, err := c.kube.RbacV1().ClusterRoleBindings().Create(c.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-ipvs-guard-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ipvs-guard-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
	}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.scrapeTokenFile = filepath.Join(c.dir, "prometheus.token")
	if err := os.WriteFile(c.scrapeTokenFile, []byte(c.scrapeToken), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// serviceAccountToken creates ServiceAccount ns/name (and ns) if needed
// and returns a token of it valid for the whole run.
func (c *cluster) serviceAccountToken(ns, name string) string {
	c.t.Helper()
	if _, err := c.kube.CoreV1().Namespaces().Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		c.t.Fatal(err)
	}
	if _, err := c.kube.CoreV1().ServiceAccounts(ns).Create(c.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		c.t.Fatal(err)
	}
	exp := int64(2 * 3600)
	tr, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(c.ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return tr.Status.Token
}

// metricsURL is node's agent's /metrics (HTTPS, the agents' default).
func (c *cluster) metricsURL(node string) string {
	return "https://" + net.JoinHostPort(c.ip(node).String(), fmt.Sprint(agentPort)) + "/metrics"
}

// scrape reads an agent's /metrics with Prometheus' token.
func (c *cluster) scrape(node string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	return ipvsguardtest.ScrapeWithToken(ctx, c.metricsURL(node), c.scrapeToken)
}

// arpResult returns the result label whose ipvs_guard_arp_probe_result
// series for ip is 1 on node's agent ("" when the agent does not probe ip).
func (c *cluster) arpResult(node string, ip netip.Addr) string {
	mfs, err := c.scrape(node)
	if err != nil {
		return ""
	}
	for _, m := range mfs["ipvs_guard_arp_probe_result"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["ip"] == ip.String() && m.GetGauge().GetValue() == 1 {
			return labels["result"]
		}
	}
	return ""
}

// arpResponders returns ipvs_guard_arp_responders for ip on node's agent (-1 when absent).
func (c *cluster) arpResponders(node string, ip netip.Addr) float64 {
	mfs, err := c.scrape(node)
	if err != nil {
		return -1
	}
	for _, m := range mfs["ipvs_guard_arp_responders"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "ip" && l.GetValue() == ip.String() {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// events returns the agent's Events on a Node by action (condition type).
func (c *cluster) events(node string) []string {
	list, err := c.kube.EventsV1().Events("").List(c.ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + node})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.ReportingController == "ipvs-guard" {
			out = append(out, e.Action+"/"+e.Reason)
		}
	}
	return out
}

// startAlerting starts Prometheus (scraping every agent as job
// "ipvs-guard" with its node label, with the chart's rules, every `for:`
// rewritten to forDur) and Alertmanager with the test's webhook.
func (c *cluster) startAlerting(forDur time.Duration) {
	c.t.Helper()
	var targets []alerttest.Target
	for _, n := range c.order {
		targets = append(targets, alerttest.Target{Node: n, Address: fmt.Sprintf("%s:%d", c.ip(n), agentPort)})
	}
	dir := filepath.Join(c.dir, "alerting")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	c.alerts = alerttest.Start(c.t, alerttest.Options{
		Dir: dir, Rules: filepath.Join(repoRoot(c.t), "deploy/ipvs-guard/files/alerts.yaml"),
		For: forDur, Targets: targets, Scheme: "https", BearerTokenFile: c.scrapeTokenFile,
	})
}

func hasLabels(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// expectAlert waits until Prometheus has alert name firing with labels,
// then until the webhook received it (a firing notification after fault),
// and returns both delays from fault.
func (c *cluster) expectAlert(name string, labels map[string]string, fault time.Time) (firing, notified time.Duration) {
	c.t.Helper()
	want := map[string]string{"alertname": name}
	for k, v := range labels {
		want[k] = v
	}
	c.waitFor(fmt.Sprintf("Prometheus fires %v", want), waitLong, func() (bool, string) {
		alerts, err := c.alerts.Alerts(c.ctx)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, a := range alerts {
			if hasLabels(a.Labels, want) && a.State == "firing" {
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s %v", a.State, a.Labels))
		}
		return false, fmt.Sprintf("alerts: %v", seen)
	})
	firing = time.Since(fault)
	var got alerttest.Alert
	c.waitFor(fmt.Sprintf("the webhook receives %v", want), waitLong, func() (bool, string) {
		for _, n := range c.alerts.Notifications() {
			if n.Received.Before(fault) {
				continue
			}
			for _, a := range n.Alerts {
				if a.Status == "firing" && hasLabels(a.Labels, want) {
					got, notified = a, n.Received.Sub(fault)
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d notifications", len(c.alerts.Notifications()))
	})
	c.t.Logf("webhook got %s firing: labels %v; summary %q", name, got.Labels, got.Annotations["summary"])
	return firing, notified
}

// expectResolved waits until the webhook receives alert name with labels
// resolved after fix, and returns the delay.
func (c *cluster) expectResolved(name string, labels map[string]string, fix time.Time) time.Duration {
	c.t.Helper()
	want := map[string]string{"alertname": name}
	for k, v := range labels {
		want[k] = v
	}
	var d time.Duration
	c.waitFor(fmt.Sprintf("the webhook receives %v resolved", want), waitLong, func() (bool, string) {
		for _, n := range c.alerts.Notifications() {
			if n.Received.Before(fix) {
				continue
			}
			for _, a := range n.Alerts {
				if a.Status == "resolved" && hasLabels(a.Labels, want) {
					d = n.Received.Sub(fix)
					return true, ""
				}
			}
		}
		return false, "not yet"
	})
	return d
}

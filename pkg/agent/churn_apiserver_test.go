// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/arpsysctl"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/clusterview"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// writesPolicy audits every write, with its user agent, and nothing else.
const writesPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
`

// TestNoNodeWritesUnderServiceChurn: with every condition False, Services
// created and deleted and endpoints scaled all over the cluster make the
// agent write its Node not once (the API server's audit log says so). The
// kube-proxy, ipvs and arp-sysctls checks are the real ones, over a node
// whose IPVS table and kube-ipvs0 follow the cluster as kube-proxy programs
// them, a second behind.
func TestNoNodeWritesUnderServiceChurn(t *testing.T) {
	const (
		node   = "node-a"
		ua     = "ipvs-guard-churn-test"
		seed   = 20
		churn  = 15 * time.Second
		period = 200 * time.Millisecond
		lag    = time.Second
	)
	s := apiservertest.Start(t, apiservertest.Options{AuditPolicy: writesPolicy})
	cfg := s.AdminConfig()
	cfg.QPS, cfg.Burst = 200, 200
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	createNode(t, admin, node)
	for i := range seed {
		createLBService(t, admin, i)
	}

	kp := newKubeProxyModel(lag, apiservertest.AgentClient(t, cfg))
	checks := []*fakeCheck{newFakeCheck(check.NameModules), newFakeCheck(check.NameARP)}
	u := startAgent(t, s, node, agentOptions{checks: checks, resync: 2 * time.Second, userAgent: ua,
		real: func(v *clusterview.View) []check.Checker { return kp.checkers(t, v, node) }})

	eventually(t, 30*time.Second, "every condition False with the real checks' reasons", func() bool {
		want := map[nodestatus.ConditionType]string{
			nodestatus.KubeProxyIPVSDegraded:      kubeproxy.ReasonIPVSMode,
			nodestatus.KubeProxyDataplaneDegraded: kubeproxy.ReasonSyncing,
			nodestatus.StrictARPDisabled:          arpsysctl.ReasonOK,
		}
		for _, ct := range nodestatus.AllConditionTypes() {
			c := nodeCondition(t, admin, node, string(ct))
			if c == nil || c.Status != corev1.ConditionFalse || (want[ct] != "" && c.Reason != want[ct]) {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * lag) // every seeded Service programmed, the last status written
	before := nodeWrites(t, s.AuditLog, ua)

	// Churn: every period a Service is created, the oldest deleted and an
	// endpoint added to a remaining one.
	oldest, next := 0, seed
	deadline := time.Now().Add(churn)
	for time.Now().Before(deadline) {
		createLBService(t, admin, next)
		if err := admin.CoreV1().Services("default").Delete(ctx, lbName(oldest), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := admin.DiscoveryV1().EndpointSlices("default").Delete(ctx, lbName(oldest), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		scaleEndpoints(t, admin, lbName(oldest+1), next)
		oldest++
		next++
		time.Sleep(period)
	}
	changes := next - seed
	time.Sleep(2 * lag)
	after := nodeWrites(t, s.AuditLog, ua)
	t.Logf("%d Services created, %d deleted, %d scaled in %s; agent Node writes: %d before, %d during and after",
		changes, changes, changes, churn, len(before), len(after)-len(before))
	if got := after[len(before):]; len(got) != 0 {
		t.Errorf("the agent wrote its Node %d times while Services churned (want 0): %v", len(got), got)
	}
	for _, ct := range nodestatus.AllConditionTypes() {
		if c := nodeCondition(t, admin, node, string(ct)); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("%s = %+v, want False", ct, c)
		}
	}
	// The ipvs check did follow the churn: its summary counts today's Services.
	eventually(t, 10*time.Second, "the ipvs check to count the Services left", func() bool {
		for _, r := range u.agent.Store().Snapshot() {
			if r.Name != check.NameIPVS || len(r.Findings) == 0 {
				continue
			}
			sum, ok := r.Findings[0].(ipvscheck.Summary)
			return ok && r.Status == check.StatusOK && sum.Services != nil && *sum.Services == seed+1 // + kubernetes
		}
		return false
	})
	if kp.programmedCount() < changes {
		t.Errorf("the kube-proxy model programmed %d Services, want at least %d", kp.programmedCount(), changes)
	}
}

func lbName(i int) string { return fmt.Sprintf("lb-%04d", i) }

// createLBService creates LoadBalancer Service i with an ingress IP and an
// EndpointSlice with one ready endpoint.
func createLBService(t *testing.T, cs kubernetes.Interface, i int) {
	t.Helper()
	ctx := context.Background()
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: lbName(i)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)}}
	if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: lbName(i), Labels: map[string]string{discoveryv1.LabelServiceName: lbName(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{readyEndpoint(i)},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(int32(8080)), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func readyEndpoint(i int) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}
}

// scaleEndpoints adds endpoint i to the Service's slice (a scale-up).
func scaleEndpoints(t *testing.T, cs kubernetes.Interface, name string, i int) {
	t.Helper()
	ctx := context.Background()
	sl, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = append(sl.Endpoints, readyEndpoint(i+10000))
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// nodeWrites returns the writes to Nodes the audit log holds from userAgent.
func nodeWrites(t *testing.T, auditLog, userAgent string) []string {
	t.Helper()
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef struct {
				Resource, Subresource, Name string
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log line %q: %v", sc.Text(), err)
		}
		if ev.ObjectRef.Resource == "nodes" && strings.HasPrefix(ev.UserAgent, userAgent) {
			out = append(out, ev.Verb+" nodes/"+ev.ObjectRef.Subresource+" "+ev.ObjectRef.Name)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// kubeProxyModel is the node's IPVS side as kube-proxy programs it: a
// Service's virtual servers (and its addresses on kube-ipvs0) appear lag
// after the Service shows up in the cluster, and go with it.
type kubeProxyModel struct {
	lag time.Duration
	// mu guards seen: when each Service (namespace/name) was first seen.
	mu   sync.Mutex
	seen map[string]time.Time
	view *clusterview.View
	node string
	// client lists the EndpointSlices kube-proxy programs (its own client).
	client kube.Interface
}

func newKubeProxyModel(lag time.Duration, client kube.Interface) *kubeProxyModel {
	return &kubeProxyModel{lag: lag, seen: map[string]time.Time{}, client: client}
}

func (m *kubeProxyModel) programmedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// Table implements ipvs.Interface.
func (m *kubeProxyModel) Table(ctx context.Context) (ipvs.Table, error) {
	c := m.view.IPVSCluster()
	svcs, err := c.Services(ctx)
	if err != nil {
		return nil, err
	}
	// kube-proxy reads every EndpointSlice it programs (the agent does not).
	l, err := m.client.EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: ipvscheck.ProxiedEndpointSlices})
	if err != nil {
		return nil, err
	}
	eps := make([]*discoveryv1.EndpointSlice, len(l.Items))
	for i := range l.Items {
		eps[i] = &l.Items[i]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var tbl ipvs.Table
	for _, e := range ipvscheck.ExpectedVirtualServers(svcs, eps, m.node) {
		first, ok := m.seen[e.Service]
		if !ok || time.Since(first) < m.lag {
			continue
		}
		entry := ipvs.Entry{Virtual: ipvs.VirtualServer{Address: e.Key.Address, Protocol: e.Key.Protocol, Port: e.Key.Port, Scheduler: "lc"}}
		for i := range e.ReadyEndpoints {
			entry.Real = append(entry.Real, ipvs.RealServer{Address: netip.AddrFrom4([4]byte{10, 244, 255, byte(i + 1)}), Port: 8080, Weight: 1})
		}
		tbl = append(tbl, entry)
	}
	return tbl, nil
}

// link is kube-ipvs0: every programmed VIP.
func (m *kubeProxyModel) link(name string) (kubeproxy.Link, error) {
	tbl, err := m.Table(context.Background())
	if err != nil {
		return kubeproxy.Link{}, err
	}
	l := kubeproxy.Link{Name: name, Exists: true}
	have := map[netip.Addr]bool{}
	for _, e := range tbl {
		if !have[e.Virtual.Address] {
			have[e.Virtual.Address] = true
			l.Addrs = append(l.Addrs, e.Virtual.Address)
		}
	}
	return l, nil
}

// checkers builds the real kube-proxy, ipvs and arp-sysctls checks over the
// model, a kube-proxy metrics port serving kube-proxy 1.37.1's bodies and a
// host tree with strict ARP in place.
func (m *kubeProxyModel) checkers(t *testing.T, v *clusterview.View, node string) []check.Checker {
	t.Helper()
	m.view, m.node = v, node
	v.AddServiceHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*corev1.Service); ok {
				m.mu.Lock()
				m.seen[s.Namespace+"/"+s.Name] = time.Now()
				m.mu.Unlock()
			}
		},
	})
	mux := http.NewServeMux()
	serve := func(path, file string) {
		body, err := os.ReadFile(filepath.Join("..", "kubeproxy", "testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	}
	serve("/proxyMode", "proxyMode-ipvs.txt")
	serve("/configz", "configz-ipvs-lc.json")
	serve("/metrics", "metrics-build-info.txt")
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	kp := kubeproxy.NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second)

	root := t.TempDir()
	for p, v := range map[string]string{
		"proc/sys/net/ipv4/conf/all/arp_ignore": "1", "proc/sys/net/ipv4/conf/all/arp_announce": "2",
		"proc/sys/net/ipv4/conf/default/arp_ignore": "0", "proc/sys/net/ipv4/conf/default/arp_announce": "0",
		"proc/sys/net/ipv4/conf/eth0/arp_ignore": "0", "proc/sys/net/ipv4/conf/eth0/arp_announce": "0",
		"sys/class/net/eth0/type": "1", "sys/class/net/eth0/flags": "0x1003",
	} {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sched := func(context.Context) (string, string) { return "lc", kubeproxy.FromConfigz }
	kpc, err := kubeproxy.NewChecker(kubeproxy.CheckerConfig{Client: kp, ReadLink: m.link})
	if err != nil {
		t.Fatal(err)
	}
	ic, err := ipvscheck.NewChecker(ipvscheck.Config{IPVS: m, ReadLink: m.link, KubeProxy: kp, Cluster: v.IPVSCluster(),
		NodeName: node, Scheduler: sched, Settle: &check.Settler{Grace: 5 * m.lag}})
	if err != nil {
		t.Fatal(err)
	}
	ac, err := arpsysctl.NewChecker(arpsysctl.Config{Root: hostfs.New(root), Interfaces: []string{"eth0"}, ReadLink: m.link,
		LoadBalancerIPs: ipvscheck.LoadBalancerIPs(v.IPVSCluster()), KubeProxy: kp})
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy's health (every mode): its condition, the fifth, is
	// written under churn no more than the others.
	sc, err := kubeproxy.NewSyncChecker(kubeproxy.SyncCheckerConfig{Client: kp})
	if err != nil {
		t.Fatal(err)
	}
	return []check.Checker{kpc, sc, ic, ac}
}

// SPDX-License-Identifier: Apache-2.0

//go:build nftables

package nftables

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/nftdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

const node = "n1"

// fixture is one kube-proxy in nftables mode and the checks next to it.
type fixture struct {
	t          *testing.T
	kpBin      string
	nft        string
	kubeconfig string
	logDir     string
	kp         *exec.Cmd
	// failFlag makes kube-proxy's nft fail while it exists.
	failFlag string
	cs       kubernetes.Interface
	drift    *nftdrift.Checker
	sync     *kubeproxy.SyncChecker
	// web is web's ClusterIP, once its pods answer.
	web string
}

func (f *fixture) startKubeProxy() {
	f.t.Helper()
	log, err := os.OpenFile(filepath.Join(f.logDir, "kube-proxy.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(f.kpBin, "--proxy-mode=nftables", "--kubeconfig="+f.kubeconfig, "--hostname-override="+node,
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--cluster-cidr=10.244.0.0/16",
		"--conntrack-max-per-core=0", "--iptables-sync-period=5s", "--v=2")
	cmd.Stdout, cmd.Stderr = log, log
	// kube-proxy runs nft (knftables) from its PATH: a wrapper that fails
	// every transaction while f.failFlag exists.
	cmd.Env = append(os.Environ(), "PATH="+f.logDir+":"+os.Getenv("PATH"))
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.kp = cmd
}

func (f *fixture) stopKubeProxy() {
	if f.kp == nil {
		return
	}
	_ = f.kp.Process.Signal(syscall.SIGCONT)
	_ = f.kp.Process.Kill()
	_ = f.kp.Wait()
	f.kp = nil
}

// restart gives a clean table: kube-proxy rewrites it whole at start.
func (f *fixture) restart(t *testing.T) {
	t.Helper()
	f.stopKubeProxy()
	_ = exec.Command(f.nft, "delete", "table", "ip", "kube-proxy").Run()
	f.startKubeProxy()
	f.waitDrift(t, "a clean table after kube-proxy's restart", 60*time.Second, func(r check.Result) bool { return r.Status == check.StatusOK })
	if f.web != "" {
		wantThrough(t, f.web, true)
	}
}

// backends serves HTTP on port 8080 of each address (added to the
// namespace's loopback), answering with the address: web's pods, so that a
// request through its ClusterIP says whether kube-proxy's table carries it
// and to which endpoint.
func backends(t *testing.T, addrs ...string) {
	for _, a := range addrs {
		if out, err := exec.Command("ip", "addr", "replace", a+"/32", "dev", "lo").CombinedOutput(); err != nil {
			t.Fatalf("ip addr replace %s: %v: %s", a, err, out)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(a, "8080"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, a) }), ReadHeaderTimeout: time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
}

// through sends one request to ip:80 through kube-proxy's rules and returns
// the endpoint that answered.
func through(ip string) (string, error) {
	c := http.Client{Timeout: 700 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + net.JoinHostPort(ip, "80") + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// wantThrough asserts that a request through ip:80 is answered (by one of
// from, when given), or that none is (answered false).
func wantThrough(t *testing.T, ip string, answered bool, from ...string) {
	t.Helper()
	got, err := through(ip)
	switch {
	case answered && err != nil:
		t.Errorf("a request through %s:80 failed (%v), while the check says kube-proxy's table carries it", ip, err)
	case answered && len(from) > 0 && !slices.Contains(from, got):
		t.Errorf("a request through %s:80 was answered by %q, want one of %v", ip, got, from)
	case !answered && err == nil:
		t.Errorf("a request through %s:80 was answered by %s, while the check says kube-proxy's table does not carry it", ip, got)
	}
}

func (f *fixture) nftOut(args ...string) string {
	out, _ := exec.Command(f.nft, args...).CombinedOutput()
	return string(out)
}

func (f *fixture) mustNft(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(f.nft, args...).CombinedOutput(); err != nil {
		f.t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (f *fixture) waitDrift(t *testing.T, what string, within time.Duration, ok func(check.Result) bool) (check.Result, time.Duration) {
	t.Helper()
	return waitCheck(t, f.drift, what, within, ok)
}

// waitCheck runs c every 200 ms until ok holds of its result, and returns
// that result and how long it took; it fails t after within.
func waitCheck(t *testing.T, c check.Checker, what string, within time.Duration, ok func(check.Result) bool) (check.Result, time.Duration) {
	t.Helper()
	start := time.Now()
	var last check.Result
	for time.Since(start) < within {
		r, err := c.Run(context.Background())
		if err == nil {
			last = r
			if ok(r) {
				return r, time.Since(start)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: never within %s; last %s/%s: %s", what, within, last.Status, last.Reason, last.Message)
	return last, 0
}

func hasFinding(r check.Result, kind, text string) bool {
	for _, fd := range r.Findings {
		if x, ok := fd.(nftdrift.Finding); ok && x.Kind == kind && strings.Contains(x.String(), text) {
			return true
		}
	}
	return false
}

func slice(svc, name string, port int32, eps ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "ipvs-guard-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		ip, nodeName, _ := strings.Cut(e, "@")
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(nodeName),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}})
	}
	return es
}

// TestKubeProxyNFTables: every fault made for real on the real kube-proxy's
// table is caught by name, and agrees with `nft -j list` at the same moment.
func TestKubeProxyNFTables(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, os.Getenv("NFT_NETNS") != "", "run through hack/test-nftables.sh (a private network namespace)")
	f := &fixture{t: t, logDir: t.TempDir()}
	f.kpBin = testenv.Tool(t, "KUBE_PROXY", "kube-proxy", "hack/apiserver/install.sh kube-proxy")
	f.nft = testenv.Tool(t, "NFT", "nft", "apt-get install nftables")
	f.failFlag = filepath.Join(f.logDir, "fail-nft")
	wrapper := fmt.Sprintf("#!/bin/sh\n# nft that fails while %s exists, as a broken or foreign nft does\n[ -e %s ] && { echo 'Error: Could not process rule: Invalid argument' >&2; exit 1; }\nexec %s \"$@\"\n", f.failFlag, f.failFlag, f.nft)
	if err := os.WriteFile(filepath.Join(f.logDir, "nft"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	s := apiservertest.Start(t, apiservertest.Options{})
	f.kubeconfig = s.Kubeconfig
	f.cs = kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	n, err := f.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: os.Getenv("NODE_IP")}}
	if _, err := f.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, typ corev1.ServiceType, etp corev1.ServiceExternalTrafficPolicy) *corev1.Service {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.ServiceSpec{Type: typ,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
		if etp != "" {
			svc.Spec.ExternalTrafficPolicy = etp
		}
		svc, err := f.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	web := mk("web", corev1.ServiceTypeClusterIP, "")
	mk("np", corev1.ServiceTypeNodePort, "")
	lb := mk("lb", corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal)
	mk("empty", corev1.ServiceTypeClusterIP, "")
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	if _, err := f.cs.CoreV1().Services("default").UpdateStatus(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, es := range []*discoveryv1.EndpointSlice{
		slice("web", "web-1", 8080, "10.244.1.5@n2", "10.244.1.6@n2"),
		slice("np", "np-1", 8080, "10.244.1.7@n2"),
		slice("lb", "lb-1", 8080, "10.244.1.8@"+node, "10.244.1.9@n2"),
		slice("empty", "empty-1", 8080),
	} {
		if _, err := f.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client, err := kube.NewForConfig(s.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	kp := kubeproxy.NewClient("127.0.0.1:10249", 2*time.Second)
	f.drift, err = nftdrift.NewChecker(nftdrift.Config{Read: (&nftdrift.Reader{}).Read, Mode: kp.ProxyMode, Services: ipvscheck.NewCluster(client).Services,
		Endpoints: ipvsdrift.NewEndpointReader(client, 0), NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	f.sync, err = kubeproxy.NewSyncChecker(kubeproxy.SyncCheckerConfig{Client: kp})
	if err != nil {
		t.Fatal(err)
	}
	f.startKubeProxy()
	t.Cleanup(f.stopKubeProxy)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(f.logDir, "kube-proxy.log"))
			lines := strings.Split(string(b), "\n")
			t.Logf("kube-proxy log tail:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	r, took := f.waitDrift(t, "kube-proxy's table matching the cluster", 60*time.Second, func(r check.Result) bool { return r.Status == check.StatusOK })
	t.Logf("kube-proxy started; table matches the cluster after %.1fs: %s", took.Seconds(), r.Message)
	sr, err := f.sync.Run(ctx)
	if err != nil || sr.Status != check.StatusOK || sr.Reason != kubeproxy.ReasonSyncing {
		t.Fatalf("kube-proxy-sync in nftables mode: %s/%s %q (%v)", sr.Status, sr.Reason, sr.Message, err)
	}
	t.Logf("kube-proxy-sync: %s", sr.Message)
	cip := web.Spec.ClusterIP
	// web's pods answer, through kube-proxy's table, at the same moment as
	// each verdict below.
	backends(t, "10.244.1.5", "10.244.1.6")
	wantThrough(t, cip, true, "10.244.1.5", "10.244.1.6")
	f.web = cip

	t.Run("element deleted from service-ips", func(t *testing.T) {
		elem := cip + " . tcp . 80"
		f.mustNft(t, "delete", "element", "ip", "kube-proxy", "service-ips", "{ "+elem+" }")
		r, took := f.waitDrift(t, "the missing element named", 10*time.Second, func(r check.Result) bool {
			return r.Reason == nftdrift.ReasonServiceIPMissing && hasFinding(r, nftdrift.KindServiceIPMissing, elem)
		})
		if out := f.nftOut("-j", "list", "map", "ip", "kube-proxy", "service-ips"); strings.Contains(out, `"`+cip+`"`) {
			t.Errorf("nft -j lists %s in service-ips while the check says it is missing:\n%s", cip, out)
		}
		wantThrough(t, cip, false)
		t.Logf("caught in %.1fs: %s", took.Seconds(), r.Message)
		f.restart(t)
	})

	t.Run("Service chain's DNAT map rewritten", func(t *testing.T) {
		tables, err := (&nftdrift.Reader{}).Read()
		if err != nil {
			t.Fatal(err)
		}
		var chain string
		for c := range tables[0].DNAT {
			if strings.HasPrefix(c, "service-") && strings.HasSuffix(c, "-default/web/tcp/http") {
				chain = c
			}
		}
		if chain == "" {
			t.Fatalf("no service chain of default/web in %v", tables[0].DNAT)
		}
		f.mustNft(t, "flush", "chain", "ip", "kube-proxy", chain)
		f.mustNft(t, "add", "rule", "ip", "kube-proxy", chain, "meta", "l4proto", "tcp", "dnat", "ip", "to", "numgen", "random", "mod", "1", "map", "{ 0 : 10.244.9.9 . 8080 }")
		r, took := f.waitDrift(t, "stale and missing endpoints named", 10*time.Second, func(r check.Result) bool {
			return hasFinding(r, nftdrift.KindStaleEndpoint, "10.244.9.9:8080") && hasFinding(r, nftdrift.KindMissingEndpoint, "10.244.1.5:8080") &&
				hasFinding(r, nftdrift.KindMissingEndpoint, "10.244.1.6:8080")
		})
		if out := f.nftOut("-j", "list", "chain", "ip", "kube-proxy", chain); !strings.Contains(out, "10.244.9.9") || strings.Contains(out, "10.244.1.5") {
			t.Errorf("nft -j list chain disagrees with the verdict:\n%s", out)
		}
		wantThrough(t, cip, false) // 10.244.9.9 is no pod
		t.Logf("caught in %.1fs: %s", took.Seconds(), r.Message)
		f.restart(t)
	})

	t.Run("SIGSTOP: stall and an endpoint removed while stopped", func(t *testing.T) {
		if r, err := f.sync.Run(ctx); err != nil || r.Status != check.StatusOK {
			t.Fatalf("kube-proxy-sync before the stop: %s/%s (%v)", r.Status, r.Reason, err)
		}
		if err := f.kp.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		es, err := f.cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		es.Endpoints = es.Endpoints[:1] // 10.244.1.6 goes
		if _, err := f.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r, took := f.waitDrift(t, "the removed endpoint stale in kube-proxy's chain", 10*time.Second, func(r check.Result) bool {
			return r.Reason == nftdrift.ReasonStaleEndpoints && hasFinding(r, nftdrift.KindStaleEndpoint, "10.244.1.6:8080")
		})
		if out := f.nftOut("-j", "list", "table", "ip", "kube-proxy"); !strings.Contains(out, "10.244.1.6") {
			t.Errorf("nft -j no longer lists 10.244.1.6 though the check calls it stale")
		}
		// Requests still reach the pod the cluster removed.
		reached := false
		for range 30 {
			if got, err := through(cip); err == nil && got == "10.244.1.6" {
				reached = true
				break
			}
		}
		if !reached {
			t.Errorf("no request through %s reached 10.244.1.6, which the check calls a stale endpoint still in kube-proxy's chain", cip)
		}
		t.Logf("stale endpoint caught %.1fs after the EndpointSlice update: %s", took.Seconds(), r.Message)
		var sr check.Result
		for {
			sr, err = f.sync.Run(ctx)
			if err == nil && sr.Status == check.StatusProblem && sr.Reason == kubeproxy.ReasonSyncStale {
				break
			}
			if time.Since(stopped) > 30*time.Second {
				t.Fatalf("no stall verdict 30s after SIGSTOP: %s/%s %q (%v)", sr.Status, sr.Reason, sr.Message, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("FIGURE SIGSTOP → kube-proxy-sync KubeProxySyncStale: %.1fs (health timeout 10s): %s", time.Since(stopped).Seconds(), sr.Message)
		if err := f.kp.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		f.waitDrift(t, "the table right again after SIGCONT", 30*time.Second, func(r check.Result) bool { return r.Status == check.StatusOK })
		cont := time.Now()
		for {
			sr, err = f.sync.Run(ctx)
			if err == nil && sr.Status == check.StatusOK {
				break
			}
			if time.Since(cont) > 30*time.Second {
				t.Fatalf("kube-proxy-sync not ok 30s after SIGCONT: %s/%s %q (%v)", sr.Status, sr.Reason, sr.Message, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("FIGURE SIGCONT → kube-proxy-sync ok: %.1fs", time.Since(cont).Seconds())
	})

	t.Run("a sync made to fail", func(t *testing.T) {
		if _, err := f.sync.Run(ctx); err != nil {
			t.Fatal(err)
		}
		// From now on every nft transaction kube-proxy runs fails, as with
		// an nft that crashes on its sets (kubernetes#136786) or lacks JSON.
		if err := os.WriteFile(f.failFlag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(f.failFlag)
		// An endpoint change makes kube-proxy sync.
		if _, err := f.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("np", "np-1", 8080, "10.244.1.7@n2", "10.244.1.10@n2"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var sr check.Result
		var err error
		for {
			sr, err = f.sync.Run(ctx)
			if err == nil && sr.Reason == kubeproxy.ReasonSyncFailing {
				break
			}
			if time.Since(start) > 40*time.Second {
				t.Fatalf("no failing verdict 40s after the conflict: %s/%s %q (%v)", sr.Status, sr.Reason, sr.Message, err)
			}
			time.Sleep(time.Second)
		}
		t.Logf("failing transactions caught in %.1fs: %s", time.Since(start).Seconds(), sr.Message)
		// The new endpoint never made it into the table: the comparison says so.
		r, _ := f.waitDrift(t, "the new endpoint missing from the table", 10*time.Second, func(r check.Result) bool {
			return hasFinding(r, nftdrift.KindMissingEndpoint, "10.244.1.10:8080")
		})
		if out := f.nftOut("-j", "list", "table", "ip", "kube-proxy"); strings.Contains(out, "10.244.1.10") {
			t.Errorf("nft -j lists 10.244.1.10, which the check calls missing")
		}
		t.Logf("and: %s", r.Message)
		os.Remove(f.failFlag)
		f.restart(t)
	})

	for _, fault := range [][]string{{"delete", "table", "ip", "kube-proxy"}, {"flush", "ruleset"}} {
		t.Run("nft "+strings.Join(fault, " "), func(t *testing.T) {
			f.mustNft(t, fault...)
			r, took := f.waitDrift(t, "the table missing", 10*time.Second, func(r check.Result) bool {
				return r.Reason == nftdrift.ReasonTableMissing && hasFinding(r, nftdrift.KindTableMissing, "table ip kube-proxy")
			})
			if out, err := exec.Command(f.nft, "-j", "list", "table", "ip", "kube-proxy").CombinedOutput(); err == nil {
				t.Errorf("nft -j list table succeeds while the check says the table is missing:\n%s", out)
			}
			wantThrough(t, cip, false)
			// kube-proxy itself says nothing.
			sr, err := f.sync.Run(ctx)
			t.Logf("FIGURE table wiped → nftables-dataplane %s: %.2fs (agent: + the settle grace and one resync); kube-proxy-sync meanwhile %s/%s (%v): %s",
				r.Reason, took.Seconds(), sr.Status, sr.Reason, err, r.Message)
			f.restart(t)
		})
	}
	t.Run("the agent: the table wiped makes KubeProxyDataplaneDegraded True on the Node", func(t *testing.T) {
		// The real agent, as the DaemonSet runs it, publishing to the Node.
		agent := exec.Command(ipvsguardtest.Binary(t), "run", "--kubeconfig", f.kubeconfig, "--node-name", node, "--root", "/",
			"--resync-period", "2s", "--initial-publish-delay", "1s", "--no-uevents", "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
		logf, err := os.Create(filepath.Join(f.logDir, "agent.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		agent.Stdout, agent.Stderr = logf, logf
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = agent.Process.Signal(syscall.SIGTERM)
			_ = agent.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				lines := strings.Split(string(b), "\n")
				t.Logf("agent log tail:\n%s", strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}()
		cond := func(ok func(corev1.NodeCondition) bool, within time.Duration, what string) (corev1.NodeCondition, time.Duration) {
			t.Helper()
			start := time.Now()
			var last corev1.NodeCondition
			for time.Since(start) < within {
				n, err := f.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
				if err == nil {
					for _, c := range n.Status.Conditions {
						if c.Type == corev1.NodeConditionType(nodestatus.KubeProxyDataplaneDegraded) {
							if last = c; ok(c) {
								return c, time.Since(start)
							}
						}
					}
				}
				time.Sleep(250 * time.Millisecond)
			}
			t.Fatalf("no %s within %s: the condition is %s/%s %q", what, within, last.Status, last.Reason, last.Message)
			return last, 0
		}
		c, _ := cond(func(c corev1.NodeCondition) bool { return c.Status == corev1.ConditionFalse }, 60*time.Second, "KubeProxyDataplaneDegraded False")
		t.Logf("the agent publishes KubeProxyDataplaneDegraded False/%s", c.Reason)
		f.mustNft(t, "delete", "table", "ip", "kube-proxy")
		c, took := cond(func(c corev1.NodeCondition) bool {
			return c.Status == corev1.ConditionTrue && c.Reason == nftdrift.ReasonTableMissing
		}, 90*time.Second, "KubeProxyDataplaneDegraded True/"+nftdrift.ReasonTableMissing)
		wantThrough(t, cip, false)
		t.Logf("FIGURE table wiped → Node condition KubeProxyDataplaneDegraded True/%s in %.1fs (settle grace 30s, resync 2s); kube-proxy's /healthz healthy meanwhile: %s", c.Reason, took.Seconds(), c.Message)
		f.restart(t)
		_, took = cond(func(c corev1.NodeCondition) bool { return c.Status == corev1.ConditionFalse }, 60*time.Second, "KubeProxyDataplaneDegraded False again")
		t.Logf("FIGURE kube-proxy restarted → the condition False again in %.1fs", took.Seconds())
	})
	t.Run("black hole: a Local LoadBalancer IP announced here with no local endpoint", func(t *testing.T) {
		lbIP := netip.MustParseAddr("192.0.2.10")
		announced := map[netip.Addr]bool{lbIP: true}
		here, err := nftdrift.NewChecker(nftdrift.Config{Read: (&nftdrift.Reader{}).Read, Mode: kp.ProxyMode, Services: ipvscheck.NewCluster(client).Services,
			Endpoints: ipvsdrift.NewEndpointReader(client, 0), NodeName: node,
			Announced: func(context.Context) (map[netip.Addr]bool, error) { return announced, nil }})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := here.Run(ctx); err != nil || r.Status != check.StatusOK {
			t.Fatalf("with a local endpoint: %s/%s %q (%v)", r.Status, r.Reason, r.Message, err)
		}
		// The local endpoint goes; n2's stays: kube-proxy drops the
		// LoadBalancer IP's external traffic on this node.
		if _, err := f.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("lb", "lb-1", 8080, "10.244.1.9@n2"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		elem := "192.0.2.10 . tcp . 80"
		start := time.Now()
		var r check.Result
		for {
			if r, err = here.Run(ctx); err == nil && r.Reason == nftdrift.ReasonBlackHole && hasFinding(r, nftdrift.KindBlackHole, elem) {
				break
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("no black hole 20s after the local endpoint went: %s/%s %q (%v)", r.Status, r.Reason, r.Message, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if out := f.nftOut("-j", "list", "map", "ip", "kube-proxy", "no-endpoint-services"); !strings.Contains(out, `"192.0.2.10"`) || !strings.Contains(out, `"drop"`) {
			t.Errorf("nft -j does not list 192.0.2.10 : drop in no-endpoint-services while the check calls it a black hole:\n%s", out)
		}
		if r.Status != check.StatusProblem || strings.Contains(r.Message, "restart kube-proxy") {
			t.Errorf("black hole: %s %q", r.Status, r.Message)
		}
		t.Logf("black hole named %.1fs after the local endpoint went: %s", time.Since(start).Seconds(), r.Message)
		// Announced by another node: kube-proxy's rule, no problem here.
		announced = map[netip.Addr]bool{}
		if r, err := here.Run(ctx); err != nil || r.Status != check.StatusOK {
			t.Errorf("announced elsewhere: %s/%s %q (%v)", r.Status, r.Reason, r.Message, err)
		}
		if _, err := f.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("lb", "lb-1", 8080, "10.244.1.8@"+node, "10.244.1.9@n2"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		announced = map[netip.Addr]bool{lbIP: true}
		f.waitDrift(t, "the local endpoint back", 20*time.Second, func(check.Result) bool {
			r, err := here.Run(ctx)
			return err == nil && r.Status == check.StatusOK
		})
	})

	t.Run("ghosts: an element and a chain of no Service are advisories", func(t *testing.T) {
		tables, err := (&nftdrift.Reader{}).Read()
		if err != nil {
			t.Fatal(err)
		}
		var webChain string
		for c := range tables[0].DNAT {
			if strings.HasPrefix(c, "service-") && strings.HasSuffix(c, "-default/web/tcp/http") {
				webChain = c
			}
		}
		if webChain == "" {
			t.Fatalf("no service chain of default/web in %v", tables[0].DNAT)
		}
		ghostChain := "service-ZZZZZZZZ-default/gone/tcp/http"
		f.mustNft(t, "add", "element", "ip", "kube-proxy", "service-ips", "{ 10.96.200.200 . tcp . 80 : goto "+webChain+" }")
		f.mustNft(t, "add", "chain", "ip", "kube-proxy", ghostChain)
		f.mustNft(t, "add", "rule", "ip", "kube-proxy", ghostChain, "counter")
		r, took := f.waitDrift(t, "both ghosts named, the check ok", 10*time.Second, func(r check.Result) bool {
			return r.Status == check.StatusOK && hasFinding(r, nftdrift.KindGhostElement, "10.96.200.200 . tcp . 80") && hasFinding(r, nftdrift.KindGhostChain, ghostChain)
		})
		for _, fd := range r.Findings {
			if x, ok := fd.(nftdrift.Finding); ok && (x.Problem || x.State().Advisory == nil) {
				t.Errorf("ghost %s is no advisory", x)
			}
		}
		if out := f.nftOut("-j", "list", "table", "ip", "kube-proxy"); !strings.Contains(out, "10.96.200.200") || !strings.Contains(out, ghostChain) {
			t.Errorf("nft -j does not list the ghosts the check names")
		}
		t.Logf("ghosts named in %.1fs, check %s: %d findings", took.Seconds(), r.Status, len(r.Findings))
		f.restart(t)

		// A deleted Service: kube-proxy removes its elements and flushes its
		// chains at once, and deletes the chains a sync later. No ghost in
		// between, whenever the check reads.
		var chains []string
		tables, err = (&nftdrift.Reader{}).Read()
		if err != nil {
			t.Fatal(err)
		}
		for c := range tables[0].Rules {
			if strings.HasSuffix(c, "-default/np/tcp/http") {
				chains = append(chains, c)
			}
		}
		if len(chains) == 0 {
			t.Fatalf("no chain of default/np in %v", tables[0].Rules)
		}
		if err := f.cs.CoreV1().Services("default").Delete(ctx, "np", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// noGhost runs the check and fails on a ghost chain of np.
		noGhost := func() {
			t.Helper()
			r, err := f.drift.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, fd := range r.Findings {
				if x, ok := fd.(nftdrift.Finding); ok && strings.Contains(x.Chain, "default/np/") && x.Kind == nftdrift.KindGhostChain {
					t.Fatalf("a chain kube-proxy flushed and deletes at its next sync called a ghost: %s", x)
				}
			}
		}
		// npChains counts np's chains left and those flushed.
		npChains := func() (left, flushed int) {
			t.Helper()
			tables, err := (&nftdrift.Reader{}).Read()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range chains {
				if n, ok := tables[0].Rules[c]; ok {
					left++
					if n == 0 {
						flushed++
					}
				}
			}
			return left, flushed
		}
		// Until kube-proxy's sync (minSyncPeriod 1s) the chains still have
		// rules: the agent's settle grace covers that moment. From the flush
		// on, they are no ghosts.
		for {
			if left, flushed := npChains(); left == flushed {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("kube-proxy did not flush np's chains within 30s")
			}
			time.Sleep(100 * time.Millisecond)
		}
		flushedAt := time.Now()
		// kube-proxy deletes them at its next sync, which waits for a
		// change (or its hourly full sync): meanwhile, no ghost.
		for time.Since(flushedAt) < 5*time.Second {
			noGhost()
			time.Sleep(200 * time.Millisecond)
		}
		if left, flushed := npChains(); left != len(chains) || flushed != left {
			t.Fatalf("np's chains: %d left, %d flushed, want all %d left flushed until the next sync", left, flushed, len(chains))
		}
		t.Logf("np's %d chains flushed %.1fs after the Service's deletion and kept, flushed, for 5s: no ghost reported", len(chains), flushedAt.Sub(start).Seconds())
		// A change makes kube-proxy sync: it deletes them.
		if _, err := f.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "trigger", Namespace: "default"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		synced := time.Now()
		for {
			noGhost()
			if left, _ := npChains(); left == 0 {
				break
			}
			if time.Since(synced) > 30*time.Second {
				t.Fatalf("kube-proxy did not delete np's chains within 30s of the next change")
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("np's chains deleted %.1fs after the next change; no ghost reported throughout", time.Since(synced).Seconds())
	})
	fmt.Fprintln(os.Stderr, "nftables tier done")
}

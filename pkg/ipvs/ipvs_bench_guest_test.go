// SPDX-License-Identifier: Apache-2.0

//go:build guest

package ipvs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// benchVirtualServers is the table size of BenchmarkGuestIPVSInspection.
const benchVirtualServers = 10000

// timedRun runs a command and returns its wall time and peak RSS (KiB).
func timedRun(b *testing.B, name string, args ...string) (time.Duration, int64, []byte) {
	b.Helper()
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if cmd.ProcessState == nil {
		b.Fatalf("%s: %v", name, err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 && name == "ipvsadm" {
		b.Fatalf("%s %v: exit %d: %s", name, args, code, errb.String())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return d, ru.Maxrss, out.Bytes()
}

// BenchmarkGuestIPVSInspection: 10,000 virtual servers x 2 real servers (and
// the 10,000 VIPs on kube-ipvs0, as kube-proxy binds them), inspected side
// by side in a rotating order every iteration:
//
//   - diagnose: `ipvs-guard diagnose -o json`, the whole product run (every
//     check; the ipvs check reads the full table, kube-ipvs0 and compares
//     schedulers; arp-sysctls evaluates the 10,000 addresses);
//   - table: this package's Table() in process (the IPVS read alone);
//   - ipvsadm: `ipvsadm -Ln` (the peer: one services dump plus one
//     destinations dump per service, like ours, plus printing).
//
// It reports each one's mean as <name>-ms/op, the ratios to ipvsadm and the
// peak RSS of the diagnose and ipvsadm processes (MiB). ns/op is the whole
// iteration and means nothing alone. `make bench-ipvs` prints them.
func BenchmarkGuestIPVSInspection(b *testing.B) {
	testenv.RequireGuest(b)
	guest.ResetModules(b)
	b.Cleanup(func() {
		guest.Run(b, "ipvsadm", "-C")
		guest.Run(b, "/usr/sbin/ip", "link", "del", "kube-ipvs0")
		guest.ResetModules(b)
	})
	loadModules(b, "ip_vs", "ip_vs_rr", "dummy")
	var rules, addrs strings.Builder
	for i := 0; i < benchVirtualServers; i++ {
		vip := fmt.Sprintf("10.%d.%d.%d", 96+i/65536, (i/256)%256, i%256)
		fmt.Fprintf(&rules, "-A -t %s:80 -s rr\n-a -t %s:80 -r 10.244.%d.%d:8080 -m -w 1\n-a -t %s:80 -r 10.245.%d.%d:8080 -m -w 1\n",
			vip, vip, (i/256)%256, i%256, vip, (i/256)%256, i%256)
		fmt.Fprintf(&addrs, "addr add %s/32 dev kube-ipvs0\n", vip)
	}
	start := time.Now()
	ipvsadmRestore(b, rules.String())
	if r := guest.Run(b, "/usr/sbin/ip", "link", "add", "kube-ipvs0", "type", "dummy"); r.ExitCode != 0 {
		b.Fatalf("%s", r)
	}
	f, err := os.CreateTemp(b.TempDir(), "addrs")
	if err != nil {
		b.Fatal(err)
	}
	f.WriteString(addrs.String())
	f.Close()
	if r := guest.Run(b, "/usr/sbin/ip", "-batch", f.Name()); r.ExitCode != 0 {
		b.Fatalf("%s", r)
	}
	b.Logf("built %d virtual servers x 2 real servers and %d kube-ipvs0 addresses in %s", benchVirtualServers, benchVirtualServers, time.Since(start))

	h := ipvs.New(hostfs.New("/"))
	defer h.Close()
	// Sanity: both tools see the whole table.
	if t, err := h.Table(context.Background()); err != nil || len(t) != benchVirtualServers || t.RealServerCount() != 2*benchVirtualServers {
		b.Fatalf("Table: %d virtual servers, %v", len(t), err)
	}
	_, _, out := timedRun(b, "ipvsadm", "-Ln")
	if n := bytes.Count(out, []byte("\n  -> ")) - 1; n != 2*benchVirtualServers { // minus the title line
		b.Fatalf("ipvsadm -Ln shows %d real servers", n)
	}
	_, _, out = timedRun(b, guest.Bin(), "diagnose", "-o", "json", "--node-name", "bench")
	if !bytes.Contains(out, []byte(fmt.Sprintf(`"virtual_servers": %d,`, benchVirtualServers))) || !bytes.Contains(out, []byte(fmt.Sprintf(`"real_servers": %d,`, 2*benchVirtualServers))) {
		b.Fatalf("diagnose did not inspect the whole table:\n%.2000s", out)
	}

	// The agent's ipvs check as it runs on every resync: the whole table
	// read and compared with 10,000 Services (each with its two ready
	// endpoints) from its caches. Its CPU time per run is the resync cost.
	checker := resyncChecker(b, h)
	var resyncCPU time.Duration

	var sum = map[string]time.Duration{}
	var rssDiagnose, rssIPVSAdm int64
	runners := []struct {
		name string
		run  func()
	}{
		{"diagnose", func() {
			d, rss, _ := timedRun(b, guest.Bin(), "diagnose", "-o", "json", "--node-name", "bench")
			sum["diagnose"] += d
			rssDiagnose = max(rssDiagnose, rss)
		}},
		{"table", func() {
			s := time.Now()
			if _, err := h.Table(context.Background()); err != nil {
				b.Fatal(err)
			}
			sum["table"] += time.Since(s)
		}},
		{"resync", func() {
			s, c := time.Now(), cpuTime(b)
			res, err := checker.Run(context.Background())
			if err != nil || res.Status != check.StatusOK {
				b.Fatalf("ipvs check: %s %s %v", res.Status, res.Message, err)
			}
			sum["resync"] += time.Since(s)
			resyncCPU += cpuTime(b) - c
		}},
		{"ipvsadm", func() {
			d, rss, _ := timedRun(b, "ipvsadm", "-Ln")
			sum["ipvsadm"] += d
			rssIPVSAdm = max(rssIPVSAdm, rss)
		}},
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range runners {
			runners[(i+j)%len(runners)].run()
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	for _, n := range []string{"diagnose", "table", "resync", "ipvsadm"} {
		b.ReportMetric(ms(sum[n]), n+"-ms/op")
	}
	b.ReportMetric(ms(resyncCPU), "resync-cpu-ms/op")
	b.ReportMetric(float64(sum["diagnose"])/float64(sum["ipvsadm"]), "ratio-diagnose/ipvsadm")
	b.ReportMetric(float64(sum["table"])/float64(sum["ipvsadm"]), "ratio-table/ipvsadm")
	b.ReportMetric(float64(rssDiagnose)/1024, "diagnose-maxrss-MiB")
	b.ReportMetric(float64(rssIPVSAdm)/1024, "ipvsadm-maxrss-MiB")
}

// cpuTime is this process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resyncChecker is the ipvs check over h with the 10,000 Services the
// benchmark's table serves, each with its two ready endpoints.
func resyncChecker(b *testing.B, h ipvs.Interface) *ipvscheck.Checker {
	b.Helper()
	var cl benchCluster
	ready := true
	for i := 0; i < benchVirtualServers; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		vip := fmt.Sprintf("10.%d.%d.%d", 96+i/65536, (i/256)%256, i%256)
		cl.svcs = append(cl.svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: vip, ClusterIPs: []string{vip},
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}})
		port, proto := int32(8080), corev1.ProtocolTCP
		cl.eps = append(cl.eps, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{fmt.Sprintf("10.244.%d.%d", (i/256)%256, i%256)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
				{Addresses: []string{fmt.Sprintf("10.245.%d.%d", (i/256)%256, i%256)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			},
			Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
		})
	}
	c, err := ipvscheck.NewChecker(ipvscheck.Config{IPVS: h, ReadLink: kubeproxy.ReadLink, Cluster: cl, NodeName: "bench",
		Scheduler: func(context.Context) (string, string) { return "rr", kubeproxy.FromFlag }})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchCluster serves fixed Services and EndpointSlices, as the agent's caches do.
type benchCluster struct {
	svcs []*corev1.Service
	eps  []*discoveryv1.EndpointSlice
}

func (c benchCluster) Services(context.Context) ([]*corev1.Service, error) { return c.svcs, nil }
func (c benchCluster) EndpointSlices(context.Context) ([]*discoveryv1.EndpointSlice, error) {
	return c.eps, nil
}

// SPDX-License-Identifier: Apache-2.0

package ipvsdrift

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs/ipvstest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// BenchmarkDriftCompare10000 is the user-space part of the ipvs-dataplane
// check's resync on a node of 10,000 Services × 3 ready endpoints: the
// table (already read) and kube-ipvs0 against the Services and the summary
// of their EndpointSlices, the weight-0 memory, the settle grace, and a
// connection table of 10,000 entries read from a file.
func BenchmarkDriftCompare10000(b *testing.B) {
	const n = 10000
	var svcs []*corev1.Service
	var eps []*discoveryv1.EndpointSlice
	var table ipvs.Table
	var link []netip.Addr
	var conn strings.Builder
	conn.WriteString("Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n")
	for i := range n {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		name := fmt.Sprintf("svc-%05d", i)
		svcs = append(svcs, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: vip.String(), ClusterIPs: []string{vip.String()},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
		})
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		}
		e := ipvs.Entry{Virtual: ipvs.VirtualServer{Address: vip, Protocol: ipvs.TCP, Port: 80, Scheduler: "rr"}}
		for j := range 3 {
			rip := netip.AddrFrom4([4]byte{10, byte(244 + j), byte(i >> 8), byte(i)})
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{rip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
			e.Real = append(e.Real, ipvs.RealServer{Address: rip, Port: 8080, Weight: 1})
		}
		fmt.Fprintf(&conn, "TCP 0A000001 C350 %08X 0050 %08X 1F90 ESTABLISHED     897\n", vip.As4(), netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}).As4())
		eps = append(eps, es)
		table = append(table, e)
		link = append(link, vip)
	}
	path := filepath.Join(b.TempDir(), "ip_vs_conn")
	if err := os.WriteFile(path, []byte(conn.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	all := Summarize(eps)
	c, err := NewChecker(Config{
		IPVS:      ipvstest.NewFake(table),
		ReadLink:  func(string) (kubeproxy.Link, error) { return kubeproxy.Link{Exists: true, Addrs: link}, nil },
		Services:  func(context.Context) ([]*corev1.Service, error) { return svcs, nil },
		Endpoints: staticEndpoints{all},
		ConnPath:  path,
		Settle:    &check.Settler{Grace: 30 * time.Second},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := cpuTime(b)
	b.ResetTimer()
	for range b.N {
		res, err := c.Run(context.Background())
		if err != nil || res.Status != check.StatusOK || len(res.Findings) != 1 {
			b.Fatalf("ipvs-dataplane: %s %s %v (%d findings)", res.Status, res.Message, err, len(res.Findings))
		}
	}
	b.StopTimer()
	cpu := float64(cpuTime(b)-start) / float64(b.N) / 1e6
	b.ReportMetric(cpu, "cpu-ms/op")
	b.ReportMetric(cpu/10, "cpu-ms-per-1000-services")
}

type staticEndpoints struct{ all ServiceEndpoints }

func (s staticEndpoints) All(context.Context) (ServiceEndpoints, time.Time, error) {
	return s.all, time.Time{}, nil
}

func (s staticEndpoints) Of(context.Context, []string) (ServiceEndpoints, error) {
	return ServiceEndpoints{}, nil
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

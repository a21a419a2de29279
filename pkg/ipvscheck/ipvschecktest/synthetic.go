// SPDX-License-Identifier: Apache-2.0

// Package ipvschecktest builds the synthetic node of the ipvs check's
// benchmarks: n ClusterIP Services, each with two ready endpoints, and the
// IPVS table kube-proxy programs for them. The guest benchmark writes the
// same table into a real kernel; the native one serves it from memory, so
// the two measure the same comparison.
package ipvschecktest

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// Port and TargetPort of every synthetic Service.
const (
	Port       = 80
	TargetPort = 8080
)

// VIP is the ClusterIP of the i-th Service (10.96.0.0 upwards).
func VIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(10), byte(96 + i/65536), byte(i / 256 % 256), byte(i % 256)})
}

// Endpoints are the two ready endpoint addresses of the i-th Service.
func Endpoints(i int) [2]netip.Addr {
	return [2]netip.Addr{
		netip.AddrFrom4([4]byte{10, 244, byte(i / 256 % 256), byte(i % 256)}),
		netip.AddrFrom4([4]byte{10, 245, byte(i / 256 % 256), byte(i % 256)}),
	}
}

// Cluster serves fixed Services and EndpointSlices, as the agent's caches
// do (it implements ipvscheck.Cluster).
type Cluster struct {
	// Svcs are the Services.
	Svcs []*corev1.Service
	// EPs are their EndpointSlices.
	EPs []*discoveryv1.EndpointSlice
}

// Services returns the Services.
func (c Cluster) Services(context.Context) ([]*corev1.Service, error) { return c.Svcs, nil }

// EndpointSlices returns every EndpointSlice (the interface allows more than
// those asked for).
func (c Cluster) EndpointSlices(context.Context, []string) ([]*discoveryv1.EndpointSlice, error) {
	return c.EPs, nil
}

// NewCluster returns n ClusterIP Services, each with one EndpointSlice of
// its two ready endpoints.
func NewCluster(n int) Cluster {
	var c Cluster
	ready := true
	port, proto := int32(TargetPort), corev1.ProtocolTCP
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		vip := VIP(i).String()
		c.Svcs = append(c.Svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: vip, ClusterIPs: []string{vip},
				Ports: []corev1.ServicePort{{Port: Port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(TargetPort)}}}})
		eps := Endpoints(i)
		c.EPs = append(c.EPs, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{eps[0].String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
				{Addresses: []string{eps[1].String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			},
			Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
		})
	}
	return c
}

// NewTable is the IPVS table kube-proxy programs for NewCluster(n): one
// round-robin virtual server per Service with its two masqueraded real
// servers.
func NewTable(n int) ipvs.Table {
	t := make(ipvs.Table, 0, n)
	for i := 0; i < n; i++ {
		eps := Endpoints(i)
		t = append(t, ipvs.Entry{
			Virtual: ipvs.VirtualServer{Address: VIP(i), Protocol: ipvs.TCP, Port: Port, Scheduler: "rr", Netmask: 0xffffffff},
			Real: []ipvs.RealServer{
				{Address: eps[0], Port: TargetPort, Weight: 1, Forward: ipvs.Masquerade},
				{Address: eps[1], Port: TargetPort, Weight: 1, Forward: ipvs.Masquerade},
			},
		})
	}
	return t
}

// Static is an ipvs.Interface that returns the same table every time,
// without copying it (a benchmark measures the check, not the double).
type Static ipvs.Table

// Table implements ipvs.Interface.
func (s Static) Table(context.Context) (ipvs.Table, error) { return ipvs.Table(s), nil }

// FixedLink reads as kube-ipvs0 holding the n Services' VIPs, as kube-proxy
// binds them.
func FixedLink(n int) kubeproxy.LinkReader {
	l := kubeproxy.Link{Name: "kube-ipvs0", Exists: true}
	for i := 0; i < n; i++ {
		l.Addrs = append(l.Addrs, VIP(i))
	}
	return func(string) (kubeproxy.Link, error) { return l, nil }
}

// NewChecker is the ipvs check as the agent runs it on every resync, over
// table and link, against NewCluster(n) with the round-robin scheduler.
func NewChecker(tb testing.TB, n int, table ipvs.Interface, link kubeproxy.LinkReader) *ipvscheck.Checker {
	tb.Helper()
	c, err := ipvscheck.NewChecker(ipvscheck.Config{IPVS: table, ReadLink: link, Cluster: NewCluster(n), NodeName: "bench",
		Scheduler: func(context.Context) (string, string) { return "rr", kubeproxy.FromFlag }})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// SPDX-License-Identifier: Apache-2.0

// Package peerstest gives agents run as host processes (the scale run, the
// MetalLB segment, apiserver-tier tests) their peers the way the chart does:
// a headless Service in the agents' namespace and, as the EndpointSlice
// controller would write them for the agent pods, EndpointSlices listing the
// agents' nodes. Pass Peers.Flag() to `ipvs-guard run`.
package peerstest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// MaxPerSlice is how many endpoints the EndpointSlice controller puts in one
// slice by default (--max-endpoints-per-slice).
const MaxPerSlice = 100

// managedBy marks the slices as written by this package, not the controller.
const managedBy = "peerstest.ipvs-guard.io"

// Peers is a peers Service and its EndpointSlices.
type Peers struct {
	// Service is the headless Service's namespace and name.
	Service types.NamespacedName
	cs      kubernetes.Interface
}

// Flag is the agents' --peers-service argument.
func (p *Peers) Flag() string { return "--peers-service=" + p.Service.String() }

// Publish creates the namespace (if missing), the headless Service and the
// EndpointSlices of nodes, all ready, MaxPerSlice endpoints a slice.
func Publish(ctx context.Context, cs kubernetes.Interface, svc types.NamespacedName, nodes []string) (*Peers, error) {
	p := &Peers{Service: svc, cs: cs}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: svc.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", svc.Namespace, err)
	}
	_, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app.kubernetes.io/name": "ipvs-guard"},
			Ports: []corev1.ServicePort{{Name: "health", Port: 9474}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating the peers Service: %w", err)
	}
	return p, p.Set(ctx, nodes, nil)
}

func (p *Peers) sliceName(i int) string { return fmt.Sprintf("%s-%d", p.Service.Name, i) }

// Set rewrites the slices to list nodes (ready unless unready[node]),
// deleting slices no longer needed, as the controller does when agent pods
// come, go or change readiness.
func (p *Peers) Set(ctx context.Context, nodes []string, unready map[string]bool) error {
	slices := p.cs.DiscoveryV1().EndpointSlices(p.Service.Namespace)
	n := 0
	for i := 0; i*MaxPerSlice < len(nodes); i++ {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: p.sliceName(i), Labels: map[string]string{
				discoveryv1.LabelServiceName: p.Service.Name, corev1.IsHeadlessService: "", discoveryv1.LabelManagedBy: managedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("health"), Port: ptr(int32(9474)), Protocol: ptr(corev1.ProtocolTCP)}},
		}
		for j, node := range nodes[i*MaxPerSlice : min(len(nodes), (i+1)*MaxPerSlice)] {
			k := i*MaxPerSlice + j
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 240+k/65536, k/256%256, k%256)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(!unready[node]), Serving: ptr(!unready[node]), Terminating: ptr(false)},
				NodeName:   ptr(node),
			})
		}
		cur, err := slices.Get(ctx, es.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = slices.Create(ctx, es, metav1.CreateOptions{})
		case err == nil:
			es.ResourceVersion = cur.ResourceVersion
			_, err = slices.Update(ctx, es, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("writing the peers' EndpointSlice %s: %w", es.Name, err)
		}
		n = i + 1
	}
	for i := n; ; i++ {
		err := slices.Delete(ctx, p.sliceName(i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("deleting the peers' EndpointSlice %s: %w", p.sliceName(i), err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

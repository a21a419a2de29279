// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// applyManifest server-side applies every object of a multi-document YAML
// file, in file order (what `kubectl apply --server-side -f` does).
func applyManifest(ctx context.Context, cfg *rest.Config, path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return 0, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	n := 0
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return n, fmt.Errorf("%s %s: %w", gvk, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := ri.Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: "e2e", Force: true}); err != nil {
			return n, fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		n++
	}
}

// createNode registers the guest as a Node the way kubelet would: its
// addresses (one InternalIP per family on a dual-stack node) and a Ready
// condition (which ipvs-guard must never touch).
func createNode(ctx context.Context, cs kubernetes.Interface, name string, ips ...string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
	}}}
	created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	now := metav1.Now()
	for _, ip := range ips {
		created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting node %s status: %w", name, err)
	}
	return nil
}

// service describes one Service of the scenario and its ready endpoints.
type service struct {
	name      string
	typ       corev1.ServiceType
	clusterIP string
	port      int32
	lbIP      string // LoadBalancer ingress IP (what MetalLB would assign), IPv4 or IPv6
	endpoint  string // a ready pod IP behind it
	// clusterIP6 and endpoint6, when set, make the Service RequireDualStack
	// (IPv4 primary) with an IPv6 ClusterIP and a ready IPv6 endpoint in an
	// EndpointSlice of its own, as the EndpointSlice controller makes one
	// per address type.
	clusterIP6 string
	endpoint6  string
}

// createService creates the Service, its EndpointSlices (no controller
// manager runs here) and, for a LoadBalancer, the ingress IP in its status.
func createService(ctx context.Context, cs kubernetes.Interface, ns string, s service) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:      s.typ,
			ClusterIP: s.clusterIP,
			Selector:  map[string]string{"app": s.name},
			Ports:     []corev1.ServicePort{{Name: "http", Port: s.port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if s.clusterIP6 != "" {
		svc.Spec.ClusterIPs = []string{s.clusterIP, s.clusterIP6}
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	if s.typ == corev1.ServiceTypeLoadBalancer {
		svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
	}
	created, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating service %s: %w", s.name, err)
	}
	if s.lbIP != "" {
		created.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: s.lbIP, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
		if _, err := cs.CoreV1().Services(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("setting the ingress IP of %s: %w", s.name, err)
		}
	}
	epss := []*discoveryv1.EndpointSlice{endpointSlice(ns, s.name, s.name+"-e2e", discoveryv1.AddressTypeIPv4, s.endpoint)}
	if s.endpoint6 != "" {
		epss = append(epss, endpointSlice(ns, s.name, s.name+"-e2e-v6", discoveryv1.AddressTypeIPv6, s.endpoint6))
	}
	for _, eps := range epss {
		if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, eps, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating endpointslice %s of %s: %w", eps.Name, s.name, err)
		}
	}
	return nil
}

// endpointSlice is the EndpointSlice of service with one ready endpoint.
func endpointSlice(ns, service, name string, typ discoveryv1.AddressType, ip string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "e2e",
		}},
		AddressType: typ,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// deleteService deletes the Service and the EndpointSlices createService made for it.
func deleteService(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	if err := cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting service %s: %w", name, err)
	}
	sel := discoveryv1.LabelServiceName + "=" + name + "," + discoveryv1.LabelManagedBy + "=e2e"
	if err := cs.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		return fmt.Errorf("deleting the endpointslices of %s: %w", name, err)
	}
	return nil
}

// agentContainer is what the guest needs from the DaemonSet's container.
type agentContainer struct {
	args []string // command and args
	caps []string // capabilities added after dropping ALL
}

// agentPod creates the Pod the DaemonSet controller would create on node
// (from the shipped DaemonSet's template) and returns it with the container's
// args and capabilities. No kubelet runs it: the guest starts the binary itself.
func agentPod(ctx context.Context, cs kubernetes.Interface, ns, ds, node string) (*corev1.Pod, agentContainer, error) {
	var ac agentContainer
	d, err := cs.AppsV1().DaemonSets(ns).Get(ctx, ds, metav1.GetOptions{})
	if err != nil {
		return nil, ac, fmt.Errorf("reading daemonset %s/%s: %w", ns, ds, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: ds + "-" + node, Namespace: ns, Labels: d.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))},
		},
		Spec: *d.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, ac, fmt.Errorf("creating the agent pod: %w", err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "ipvs-guard" && len(d.Spec.Template.Spec.Containers) > 1 {
			continue
		}
		ac.args = append(append(ac.args, c.Command...), c.Args...)
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			return nil, ac, fmt.Errorf("the DaemonSet's container does not drop ALL capabilities")
		}
		if sc.Privileged != nil && *sc.Privileged {
			return nil, ac, fmt.Errorf("the DaemonSet's container is privileged")
		}
		for _, cp := range sc.Capabilities.Add {
			ac.caps = append(ac.caps, string(cp))
		}
	}
	return created, ac, nil
}

// podToken asks for a token of the Pod's ServiceAccount bound to the Pod, as
// kubelet projects it: it carries the node-name claim the admission policy checks.
func podToken(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (string, error) {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	out, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for pod %s: %w", pod.Name, err)
	}
	return out.Status.Token, nil
}

// kubeProxyToken creates kube-proxy's identity as kubeadm does (ServiceAccount
// kube-system/kube-proxy bound to system:node-proxier) and returns a token.
func kubeProxyToken(ctx context.Context, cs kubernetes.Interface) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}}
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating kube-proxy's service account: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-proxier"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "kube-proxy", Namespace: "kube-system"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("binding kube-proxy to system:node-proxier: %w", err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	out, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "kube-proxy", tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting kube-proxy's token: %w", err)
	}
	return out.Status.Token, nil
}

// guestKubeconfig is a kubeconfig for the guest: the host's loopback API
// server is 10.0.2.2 there, which its certificate does not name.
func guestKubeconfig(server string, ca []byte, user, token string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, TLSServerName: "kubernetes"}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
	cfg.CurrentContext = "e2e"
	return clientcmd.Write(*cfg)
}

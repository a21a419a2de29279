// SPDX-License-Identifier: Apache-2.0

package metallbtest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipvs-guard/ipvs-guard/internal/l2segment"
	"github.com/ipvs-guard/ipvs-guard/internal/proc"
)

// MetalLB's configuration resources.
var (
	IPAddressPoolGVR   = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	L2AdvertisementGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
)

// Applier server-side-applies manifest files (apiservertest.Server.Apply).
type Applier interface {
	Apply(ctx context.Context, files ...string) error
}

// MetalLB is MetalLB installed on an API server: its controller on the
// host and one speaker per node.
type MetalLB struct {
	// Paths are the binaries and CRDs used.
	Paths Paths
	// Dir holds the logs.
	Dir string
	// Kube and Dyn are admin clients.
	Kube kubernetes.Interface
	Dyn  dynamic.Interface
	// HostKubeconfig is the admin kubeconfig for processes on the host;
	// NodeKubeconfig the one for processes in the nodes' namespaces.
	HostKubeconfig, NodeKubeconfig string
	// Controller is the running controller.
	Controller *proc.Process
	// Speakers are the running speakers by node name.
	Speakers map[string]*proc.Process
}

// Install applies MetalLB's CRDs, waits until they serve, and creates the
// namespace (with its default ServiceAccount, which Pods need) and the
// IPAddressPool "pool" over addrs (e.g. "10.231.7.200-10.231.7.220").
func Install(ctx context.Context, a Applier, p Paths, kube kubernetes.Interface, dyn dynamic.Interface, addrs string) error {
	crds, err := filepath.Glob(filepath.Join(p.CRDs, "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", p.CRDs, err)
	}
	if err := a.Apply(ctx, crds...); err != nil {
		return fmt.Errorf("applying MetalLB's CRDs: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, gvr := range []schema.GroupVersionResource{IPAddressPoolGVR, L2AdvertisementGVR, {Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}} {
			if _, err := dyn.Resource(gvr).Namespace(Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("MetalLB's CRDs not served: %w", err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "pool", "namespace": Namespace},
		"spec":     map[string]any{"addresses": []any{addrs}},
	}}
	if _, err := dyn.Resource(IPAddressPoolGVR).Namespace(Namespace).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the IPAddressPool: %w", err)
	}
	return nil
}

// ApplyL2Advertisement creates or replaces the L2Advertisement name over
// the pool "pool"; spec may add interfaces / nodeSelectors.
func ApplyL2Advertisement(ctx context.Context, dyn dynamic.Interface, name string, spec map[string]any) error {
	s := map[string]any{"ipAddressPools": []any{"pool"}}
	for k, v := range spec {
		s[k] = v
	}
	ri := dyn.Resource(L2AdvertisementGVR).Namespace(Namespace)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": name, "namespace": Namespace},
		"spec":     s,
	}}
	old, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	obj.SetResourceVersion(old.GetResourceVersion())
	_, err = ri.Update(ctx, obj, metav1.UpdateOptions{})
	return err
}

// DeleteL2Advertisement deletes the L2Advertisement name.
func DeleteL2Advertisement(ctx context.Context, dyn dynamic.Interface, name string) error {
	return dyn.Resource(L2AdvertisementGVR).Namespace(Namespace).Delete(ctx, name, metav1.DeleteOptions{})
}

// WriteKubeconfig writes a token kubeconfig for server. tlsServerName, when
// set, is the name the API server's certificate is checked against (its
// self-signed certificate names "kubernetes", not the segment's address).
func WriteKubeconfig(path, server, caFile, token, tlsServerName string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile, TLSServerName: tlsServerName}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	return clientcmd.WriteToFile(*cfg, path)
}

// StartController starts MetalLB's controller on the host (no webhooks, no
// metrics port; it assigns the pool's IPs to LoadBalancer Services).
func (m *MetalLB) StartController(ctx context.Context, healthPort int) error {
	// It reads its own Pod (owner references of what it creates).
	if err := m.ensurePod(ctx, "controller", "", netip.Addr{}, map[string]string{"app": "metallb", "component": "controller"}); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, m.Paths.Controller,
		"--pod-name=controller", "--namespace="+Namespace, "--webhook-mode=disabled", "--disable-cert-rotation",
		"--port=0", "--health-probe-port="+strconv.Itoa(healthPort), "--log-level=info")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+m.HostKubeconfig)
	p, err := proc.Start("metallb-controller", cmd, filepath.Join(m.Dir, "controller.log"))
	if err != nil {
		return err
	}
	m.Controller = p
	return nil
}

// StartSpeaker creates (or refreshes) the speaker Pod object for node and
// starts MetalLB's speaker in the node's namespace with only CAP_NET_RAW
// (util-linux setpriv: bounding, inheritable and ambient sets cut to it),
// memberlist bound to the node's IP.
func (m *MetalLB) StartSpeaker(ctx context.Context, n *l2segment.Node) error {
	pod := "speaker-" + n.Name
	if err := m.ensurePod(ctx, pod, n.Name, n.IP, map[string]string{"app": "metallb", "component": "speaker"}); err != nil {
		return err
	}
	cmd := n.Command(ctx, "setpriv", "--bounding-set=-all,+net_raw", "--inh-caps=-all,+net_raw", "--ambient-caps=-all,+net_raw", "--no-new-privs", "--",
		"env", "KUBECONFIG="+m.NodeKubeconfig,
		m.Paths.Speaker, "--node-name="+n.Name, "--pod-name="+pod, "--namespace="+Namespace,
		"--ml-bindaddr="+n.IP.String(), "--ml-labels="+SpeakerLabels, "--port=0", "--log-level=info")
	p, err := proc.Start("metallb-speaker-"+n.Name, cmd, filepath.Join(m.Dir, "speaker-"+n.Name+".log"))
	if err != nil {
		return err
	}
	if m.Speakers == nil {
		m.Speakers = map[string]*proc.Process{}
	}
	m.Speakers[n.Name] = p
	return nil
}

// SpeakerArgs writes the speaker Pod object for a node that runs its
// speaker itself (a virtual machine on the segment: internal/guestvm), with
// the node's IP, and returns the speaker's arguments for that node, as
// StartSpeaker passes them (KUBECONFIG comes from the caller).
func (m *MetalLB) SpeakerArgs(ctx context.Context, node string, ip netip.Addr) ([]string, error) {
	pod := "speaker-" + node
	if err := m.ensurePod(ctx, pod, node, ip, map[string]string{"app": "metallb", "component": "speaker"}); err != nil {
		return nil, err
	}
	return []string{"--node-name=" + node, "--pod-name=" + pod, "--namespace=" + Namespace,
		"--ml-bindaddr=" + ip.String(), "--ml-labels=" + SpeakerLabels, "--port=0", "--log-level=info"}, nil
}

// ensurePod writes the Pod a DaemonSet or Deployment would have made,
// Running on node with the node's IP (hostNetwork) when ip is valid.
func (m *MetalLB) ensurePod(ctx context.Context, name, node string, ip netip.Addr, labels map[string]string) error {
	pods := m.Kube.CoreV1().Pods(Namespace)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p, err = pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:    node,
				HostNetwork: ip.IsValid(),
				Containers:  []corev1.Container{{Name: labels["component"], Image: "quay.io/metallb/" + labels["component"] + ":" + Version}},
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing Pod %s: %w", name, err)
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		StartTime:  &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
	}
	if ip.IsValid() {
		p.Status.HostIP, p.Status.PodIP = ip.String(), ip.String()
		p.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating Pod %s status: %w", name, err)
	}
	return nil
}

// Close stops every process.
func (m *MetalLB) Close() {
	for _, p := range m.Speakers {
		p.Stop(5 * time.Second)
	}
	if m.Controller != nil {
		m.Controller.Stop(5 * time.Second)
	}
}

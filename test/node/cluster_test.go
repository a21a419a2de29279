// SPDX-License-Identifier: Apache-2.0

//go:build node

package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/controlplanetest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

const (
	namespace = "ipvs-guard"
	release   = "ipvs-guard"
	nodeName  = "node-1"
)

func chartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "ipvs-guard")
}

// helm runs the real helm against the API server's admin kubeconfig and
// returns its output (warnings included).
func helm(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	bin := testenv.Tool(t, "HELM", "helm", "hack/test-node.sh builds it")
	cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// registerNode creates a Node with a node's capacity, as a kubelet would
// register it, so the scheduler has somewhere to bind the pod.
func registerNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("2Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	n.Status.Capacity, n.Status.Allocatable = res, res
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestHelmInstallControlPlane installs the chart with default values but the
// image into a cluster whose PodSecurity admission enforces the restricted
// level on every namespace but kube-system, as RKE2's CIS profile does, and
// follows the real controllers. Into a namespace nobody labelled
// (`--create-namespace`): helm warns that the pod template would violate
// restricted and its NOTES say how to label the namespace, the DaemonSet is
// created, and no pod ever is: the DaemonSet controller's FailedCreate
// Events name PodSecurity (host network, hostPath volumes, the added
// capabilities) and the DaemonSet's status counts no pod. With the chart creating its namespace labelled
// privileged (namespace.create, the release kept in kube-system): the
// DaemonSet controller creates the pod, the scheduler binds it to the Node,
// the pod carries the projected service-account token and NODE_NAME from the
// downward API, the namespace gets kube-root-ca.crt; `helm uninstall`
// removes the DaemonSet and the garbage collector deletes its pod.
func TestHelmInstallControlPlane(t *testing.T) {
	srv := apiservertest.Start(t, controlplanetest.ServerOptions(controlplanetest.PodSecurityRestricted(t, apiservertest.Options{})))
	controlplanetest.Start(t, controlplanetest.Options{API: srv})
	cs := kubernetes.NewForConfigOrDie(srv.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	registerNode(ctx, t, cs, nodeName)

	// An unlabelled namespace under a restricted default: no pod.
	const plain = "unlabelled"
	out := helm(t, srv.Kubeconfig, "install", release, chartDir(), "--namespace", plain, "--create-namespace",
		"--set", "image.repository=localhost/ipvs-guard", "--set", "image.tag=node-test")
	// helm logs the API server's warning through klog, quotes escaped.
	if !strings.Contains(out, `would violate PodSecurity \"restricted:latest\": host namespaces (hostNetwork=true)`) {
		t.Errorf("helm install into an unlabelled namespace printed no PodSecurity warning:\n%s", out)
	}
	// The chart's NOTES tell how to label it.
	if want := "kubectl label namespace " + plain + " --overwrite pod-security.kubernetes.io/enforce=privileged"; !strings.Contains(out, want) {
		t.Errorf("helm install's NOTES lack %q:\n%s", want, out)
	}
	var forbidden string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(plain).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=DaemonSet,reason=FailedCreate"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		forbidden = evs.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no FailedCreate Event on the DaemonSet in the unlabelled namespace: %v", err)
	}
	t.Logf("DaemonSet %s/%s FailedCreate: %s", plain, release, forbidden)
	for _, want := range []string{`violates PodSecurity "restricted:latest"`, "host namespaces (hostNetwork=true)", `use restricted volume type "hostPath"`, `must not include "NET_ADMIN", "NET_RAW", "SYS_MODULE"`} {
		if !strings.Contains(forbidden, want) {
			t.Errorf("FailedCreate message lacks %q: %s", want, forbidden)
		}
	}
	ds, err := cs.AppsV1().DaemonSets(plain).Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(plain).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 || ds.Status.CurrentNumberScheduled != 0 || ds.Status.NumberReady != 0 {
		t.Errorf("unlabelled namespace: %d pods, DaemonSet status %+v; want no pod", len(pods.Items), ds.Status)
	}
	helm(t, srv.Kubeconfig, "uninstall", release, "--namespace", plain, "--wait", "--no-hooks")

	// The chart's own namespace, labelled privileged; the release in
	// kube-system (Helm stores it before it creates anything).
	start := time.Now()
	out = helm(t, srv.Kubeconfig, "install", release, chartDir(), "--namespace", "kube-system",
		"--set", "namespace.create=true", "--set", "namespace.name="+namespace,
		"--set", "image.repository=localhost/ipvs-guard", "--set", "image.tag=node-test",
		// kube-proxy is a host process in IPVS mode that cannot start without
		// the modules, and nothing else on the node tells its mode.
		"--set", "assumeProxyMode=ipvs")
	if want := "namespace " + namespace + " admits the agent's pods"; !strings.Contains(out, want) {
		t.Errorf("helm install's NOTES lack %q:\n%s", want, out)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"enforce", "audit", "warn"} {
		if got := ns.Labels["pod-security.kubernetes.io/"+mode]; got != "privileged" {
			t.Errorf("namespace %s label pod-security.kubernetes.io/%s = %q, want privileged", namespace, mode, got)
		}
	}

	var pod corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 || pods.Items[0].Spec.NodeName == "" {
			return false, nil
		}
		pod = pods.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no DaemonSet pod bound to a node: %v", err)
	}
	t.Logf("helm install -> DaemonSet pod created and bound: %.1f s", time.Since(start).Seconds())

	if pod.Spec.NodeName != nodeName {
		t.Errorf("pod bound to %q, want %q", pod.Spec.NodeName, nodeName)
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "DaemonSet" || pod.OwnerReferences[0].Name != release {
		t.Errorf("pod owners %+v, want the DaemonSet %s", pod.OwnerReferences, release)
	}
	if !slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue
	}) {
		t.Errorf("pod conditions %+v lack PodScheduled=True", pod.Status.Conditions)
	}
	// The scheduler records its Event asynchronously (its broadcaster
	// batches writes): the pod can be bound before the Event is stored.
	var reporters []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		scheduled, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=Scheduled"})
		if err != nil {
			return false, err
		}
		reporters = nil
		for _, e := range scheduled.Items {
			reporters = append(reporters, e.ReportingController+e.Source.Component)
		}
		return len(reporters) > 0, nil
	})
	if err != nil {
		t.Errorf("waiting for the Scheduled Event: %v", err)
	}
	if diff := cmp.Diff([]string{"default-scheduler"}, reporters); diff != "" {
		t.Errorf("Scheduled events' reporter (-want +got):\n%s", diff)
	}
	// The ServiceAccount admission plugin mounted the kubelet-issued token.
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool {
			return s.ServiceAccountToken != nil
		})
	}) {
		t.Error("pod has no projected service-account token volume")
	}

	// The root CA publisher of kube-controller-manager.
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(ca), nil
	})
	if err != nil {
		t.Errorf("kube-root-ca.crt in %s does not carry the API server's CA: %v", namespace, err)
	}

	// No kubelet runs the chart's post-delete cleanup Job here: the hook is
	// skipped (the chart tier runs `ipvs-guard cleanup` with its RBAC).
	helm(t, srv.Kubeconfig, "uninstall", release, "--namespace", "kube-system", "--wait", "--no-hooks")
	// The garbage collector deletes the pod; with no kubelet to confirm
	// the container stopped, it stays Terminating.
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Errorf("the garbage collector did not delete the DaemonSet's pod after helm uninstall: %v", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build node

package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/controlplanetest"
	"github.com/ipvs-guard/ipvs-guard/internal/nodevm"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// kubeletNode is the kubelet node of this package's tests and of `make
// demo`: a control plane on the host (kube-apiserver + etcd,
// kube-controller-manager, kube-scheduler) and the Debian 12 node under
// QEMU with the kubelet, containerd and kube-proxy, the guest scenario
// (testdata/node-kubelet-scenario) taking its steps from ctl.
type kubeletNode struct {
	t   *testing.T
	ctx context.Context
	srv *apiservertest.Server
	cs  kubernetes.Interface
	vm  *nodevm.VM
	ctl *control
	// started is when QEMU started, nodeReady when the Node was Ready.
	started, nodeReady time.Time
	// pod is the chart's pod as getPod last saw it.
	pod corev1.Pod
}

// kubeletNodeOptions vary the kubelet node of a test. Zero values pick
// the defaults.
type kubeletNodeOptions struct {
	// images are docker archives imported into the node's containerd
	// besides the pause image; nil imports the agent's image
	// (NODE_AGENT_IMAGE, localhost/ipvs-guard:node).
	images []string
	// files are added to the node's disk.
	files map[string]nodevm.File
	// podSecurity makes the API server's PodSecurity admission enforce the
	// restricted level on every namespace but kube-system, as RKE2's CIS
	// profile does (controlplanetest.PodSecurityRestricted).
	podSecurity bool
}

// startKubeletNode starts the control plane and the node and waits until
// the kubelet has registered the Node and reports it Ready.
func startKubeletNode(t *testing.T) *kubeletNode {
	t.Helper()
	return startKubeletNodeWith(t, kubeletNodeOptions{})
}

// startKubeletNodeWith is startKubeletNode with o.
func startKubeletNodeWith(t *testing.T, o kubeletNodeOptions) *kubeletNode {
	t.Helper()
	for _, name := range []string{"kubelet", "kube-proxy"} {
		_, err := os.Stat(apiservertest.CachedBinary(name))
		testenv.Require(t, err == nil, name+" is needed: run hack/apiserver/install.sh "+name)
	}
	testenv.Require(t, os.Getenv("CONTAINERD_DIR") != "", "CONTAINERD_DIR is needed: run hack/ensure-containerd.sh")
	pause := imageArchive(t, "NODE_PAUSE_IMAGE", "pause")
	images := o.images
	if images == nil {
		images = []string{imageArchive(t, "NODE_AGENT_IMAGE", "ipvs-guard")}
	}

	k := &kubeletNode{t: t, ctx: context.Background()}
	opts := nodevm.KubeletServerOptions(apiservertest.Options{})
	if o.podSecurity {
		opts = controlplanetest.PodSecurityRestricted(t, opts)
	}
	k.srv = apiservertest.Start(t, controlplanetest.ServerOptions(opts))
	controlplanetest.Start(t, controlplanetest.Options{API: k.srv})
	k.cs = kubernetes.NewForConfigOrDie(k.srv.AdminConfig())
	if err := nodevm.PublishAPIServer(k.ctx, k.cs, k.srv); err != nil {
		t.Fatal(err)
	}
	k.ctl = startControl(t)
	files, err := nodevm.KubeletFiles(nodevm.KubeletOptions{API: k.srv, Images: append([]string{pause}, images...)})
	if err != nil {
		t.Fatal(err)
	}
	for path, f := range o.files {
		files[path] = f
	}
	files["/usr/local/sbin/node-kubelet-scenario"] = nodevm.File{Source: filepath.Join("testdata", "node-kubelet-scenario"), Mode: 0o755}
	files["/etc/systemd/system/node-kubelet-scenario.service"] = nodevm.File{Source: filepath.Join("testdata", "node-kubelet-scenario.service")}
	files["/etc/systemd/system/multi-user.target.wants/node-kubelet-scenario.service"] = nodevm.File{Link: "/etc/systemd/system/node-kubelet-scenario.service"}
	files["/etc/node-scenario/control"] = nodevm.File{Data: k.ctl.addr}
	k.vm = nodevm.Start(t, nodevm.Options{Net: true, Memory: "2G", DiskSize: "4G", Files: files})
	k.started = time.Now()
	// The kubelet registers the Node and reports it Ready (containerd's
	// runtime and network ready).
	k.nodeReady = k.poll("the kubelet's Node Ready", 10*time.Minute, func(ctx context.Context) (bool, error) {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, nodevm.NodeName, metav1.GetOptions{})
		return err == nil && nodeConditionTrue(n, corev1.NodeReady), nil
	})
	return k
}

// poll waits for cond; on a timeout it prints the guest's journal of
// containerd and the kubelet and fails the test.
func (k *kubeletNode) poll(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) time.Time {
	k.t.Helper()
	if err := wait.PollUntilContextTimeout(k.ctx, 250*time.Millisecond, timeout, true, cond); err != nil {
		k.ctl.do("dump")
		_, _ = k.vm.WaitConsole(k.ctx, "dumped=", 1, time.Minute)
		k.t.Fatalf("%s: %v; console tail:\n%s", what, err, consoleTail(k.vm, 250))
	}
	return time.Now()
}

// getPod reads the chart's only pod into k.pod.
func (k *kubeletNode) getPod(ctx context.Context) bool {
	pods, err := k.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ipvs-guard"})
	if err != nil || len(pods.Items) != 1 {
		return false
	}
	k.pod = pods.Items[0]
	return true
}

// helmInstall installs the chart with its defaults but the image and
// waits until the pod is Running, then Ready, then the Node carries all
// four conditions False; it returns when each happened.
func (k *kubeletNode) helmInstall() (install, running, ready, published time.Time) {
	k.t.Helper()
	install = time.Now()
	helm(k.t, k.srv.Kubeconfig, "install", release, chartDir(), "--namespace", namespace, "--create-namespace",
		"--set", "image.repository=localhost/ipvs-guard", "--set", "image.tag=node")
	running = k.poll("the pod Running", 10*time.Minute, func(ctx context.Context) (bool, error) {
		return k.getPod(ctx) && k.pod.Status.Phase == corev1.PodRunning, nil
	})
	ready = k.poll("the pod Ready", 5*time.Minute, func(ctx context.Context) (bool, error) {
		return k.getPod(ctx) && podConditionTrue(&k.pod, corev1.PodReady), nil
	})
	published = k.poll("all four conditions False on the Node", 5*time.Minute, func(ctx context.Context) (bool, error) {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, nodevm.NodeName, metav1.GetOptions{})
		return err == nil && allFalse(n), nil
	})
	return install, running, ready, published
}

// unloadUnderPod unloads module on the node under the running pod and
// returns what the node saw of its reload (the "await" fact: "loaded after
// …" when the pod loaded it back), failing the test if it was not.
func (k *kubeletNode) unloadUnderPod(module string) string {
	k.t.Helper()
	k.ctl.do("unload " + module)
	if _, err := k.vm.WaitConsole(k.ctx, "NODE-SCENARIO boot=1 unload="+module+" ok", 1, 2*time.Minute); err != nil {
		k.t.Fatal(err)
	}
	k.ctl.do("await " + module)
	raw, err := k.vm.WaitConsole(k.ctx, "NODE-SCENARIO boot=1 await=", 1, 3*time.Minute)
	if err != nil {
		k.t.Fatal(err)
	}
	got := facts(raw)[1]["await"]
	if !strings.Contains(got, "loaded after") {
		k.t.Fatalf("the remediating pod did not load %s again: %s", module, got)
	}
	return got
}

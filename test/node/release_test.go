// SPDX-License-Identifier: Apache-2.0

//go:build node

package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/nodevm"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

func repoRoot() string { return filepath.Join(chartDir(), "..", "..") }

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startRegistry runs the OCI registry of hack/tools/registry
// (go-containerregistry's, in memory) on the host's loopback and returns its
// host:port and its log (errors only).
func startRegistry(t *testing.T) (string, *syncBuffer) {
	t.Helper()
	bin := testenv.Tool(t, "REGISTRY_BIN", "registry", "hack/test-node.sh builds it from hack/tools/registry")
	cmd := exec.Command(bin, "--address", "127.0.0.1:0")
	log := &syncBuffer{}
	cmd.Stderr = log
	// Its first line says where it listens (an os.Pipe: the process is
	// reaped in the background, which must not close what is read).
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd.Stdout = pw
	p, err := apiservertest.StartProcess(cmd)
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("registry: %v\n%s", err, log)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("registry printed %q", line)
	}
	return addr, log
}

// TestKubeletNodeRelease is the operator's way to the image and the chart,
// end to end on the kubelet node, under PodSecurity admission enforcing the
// restricted level everywhere but kube-system (RKE2's CIS profile):
//
//   - hack/release.sh (what `make release` and the release workflow run)
//     builds the image from the Dockerfile with buildah, packages the chart
//     and pushes both to a real OCI registry on the host's loopback
//     (go-containerregistry's), and writes the image's docker-archive for
//     air-gapped nodes;
//   - the archive is copied onto the node and imported into containerd with
//     `ctr -n k8s.io images import` before the kubelet starts, as RKE2
//     imports /var/lib/rancher/rke2/agent/images/;
//   - the namespace is labelled privileged as the README says; `helm install
//     oci://…` pulls the chart from the registry, with the image the name
//     inside the archive and pullPolicy Never: the pod runs from the
//     imported archive;
//   - `helm upgrade` to the registry's name as the node reaches it: the
//     node's containerd pulls the image (tag: the chart's appVersion,
//     VERSION) from the same registry over QEMU's user network (plain HTTP
//     through a hosts.toml) and the pod runs: its imageID is the registry's
//     repo digest (the archive's pod had only the config digest);
//   - report-only (remediation.enabled=false): with /etc/modules and every
//     modules-load.d directory removed from the node first, none of them
//     exists after each pod ran.
//
// Finding (one run): in the other order, the same image pulled from the
// registry first, the kubelet then reported ErrImageNeverPull for the
// archive's name (imported at boot, as `ctr images import` of the same
// archive lists it on a host containerd 2.4.2); not yet explained.
func TestKubeletNodeRelease(t *testing.T) {
	registry, _ := startRegistry(t)
	port := registry[strings.LastIndex(registry, ":")+1:]
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(raw))

	// The release, as the workflow runs it, for this machine's
	// architecture (RELEASE_PLATFORMS may name more).
	out := t.TempDir()
	platforms := os.Getenv("RELEASE_PLATFORMS")
	if platforms == "" {
		platforms = "linux/" + runtime.GOARCH
	}
	script := exec.Command(filepath.Join(repoRoot(), "hack", "release.sh"))
	script.Env = append(os.Environ(), "REGISTRY="+registry+"/ipvs-guard", "PLATFORMS="+platforms,
		"PLAIN_HTTP=1", "RUNTIME_IMAGE=scratch", "OUT="+out, "RELEASE_TAG=v"+version)
	start := time.Now()
	if b, err := script.CombinedOutput(); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, b)
	} else {
		t.Logf("hack/release.sh (%s) in %.1f s:\n%s", platforms, time.Since(start).Seconds(), lastLines(string(b), 8))
	}
	archive := filepath.Join(out, fmt.Sprintf("ipvs-guard-%s-linux-%s.tar", version, runtime.GOARCH))
	if st, err := os.Stat(archive); err != nil {
		t.Fatalf("the release wrote no image archive: %v", err)
	} else {
		t.Logf("image archive %s: %.1f MB", filepath.Base(archive), float64(st.Size())/1e6)
	}

	// The node: the archive imported at boot, the registry reachable at
	// the host's address over plain HTTP.
	guestRegistry := nodevm.HostAddr + ":" + port
	hostsPath, hostsFile := nodevm.PlainHTTPRegistry(guestRegistry)
	k := startKubeletNodeWith(t, kubeletNodeOptions{
		images:      []string{archive},
		files:       map[string]nodevm.File{hostsPath: hostsFile},
		podSecurity: true,
	})
	ctx, cs, vm, ctl, srv := k.ctx, k.cs, k.vm, k.ctl, k.srv
	t.Logf("QEMU start -> Node registered and Ready: %.1f s", k.nodeReady.Sub(k.started).Seconds())

	// Nothing declared anywhere systemd-modules-load looks, /etc/modules
	// gone; the modules loaded by hand so kube-proxy (IPVS mode) starts.
	declared := "/etc/modules /etc/modules-load.d /run/modules-load.d /usr/local/lib/modules-load.d /usr/lib/modules-load.d /lib/modules-load.d"
	ctl.do("remove " + declared)
	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=1 remove=ok", 1, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	absent := func(when string) {
		t.Helper()
		n := strings.Count(readConsole(t, vm), "NODE-SCENARIO boot=1 paths=")
		ctl.do("paths " + declared)
		raw, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=1 paths=", n+1, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := lastFact(raw, "NODE-SCENARIO boot=1 paths=")
		for _, p := range strings.Fields(declared) {
			if !strings.Contains(got, p+":absent") {
				t.Errorf("%s: %s exists on the node (%s)", when, p, got)
			}
		}
		t.Logf("%s: %s", when, got)
	}
	absent("before helm install")
	ctl.do("load ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack")
	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=1 load=ok", 1, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// The namespace labelled privileged, as the README's install says.
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged",
		"pod-security.kubernetes.io/audit":   "privileged",
		"pod-security.kubernetes.io/warn":    "privileged",
	}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chartRef := "oci://" + registry + "/ipvs-guard/charts/ipvs-guard"

	// First the archive imported at boot, as on an air-gapped node: the
	// name inside it, pullPolicy Never (nothing answers at that name on
	// the node).
	install := time.Now()
	helmOut := helm(t, srv.Kubeconfig, "install", release, chartRef, "--version", version, "--plain-http",
		"--namespace", namespace, "--set", "image.repository="+registry+"/ipvs-guard/ipvs-guard",
		"--set", "image.pullPolicy=Never", "--set", "remediation.enabled=false")
	if strings.Contains(helmOut, "PodSecurity") {
		t.Errorf("helm install into the labelled namespace warned about PodSecurity:\n%s", helmOut)
	}
	k.poll("the report-only pod from the imported archive Ready", 10*time.Minute, func(ctx context.Context) (bool, error) {
		return k.getPod(ctx) && podConditionTrue(&k.pod, corev1.PodReady), nil
	})
	st := k.pod.Status.ContainerStatuses[0]
	t.Logf("helm install oci://… --set image.pullPolicy=Never, the archive's image -> pod Ready %.1f s: image %s, imageID %s",
		time.Since(install).Seconds(), st.Image, st.ImageID)
	if want := registry + "/ipvs-guard/ipvs-guard:" + version; st.Image != want {
		t.Errorf("container image %q, want the archive's %s", st.Image, want)
	}
	absent("report-only pod from the archive Ready")

	// Then the image pulled by containerd from the registry.
	old := k.pod.UID
	upgrade := time.Now()
	helm(t, srv.Kubeconfig, "upgrade", release, chartRef, "--version", version, "--plain-http", "--namespace", namespace,
		"--reuse-values", "--set", "image.repository="+guestRegistry+"/ipvs-guard/ipvs-guard", "--set", "image.pullPolicy=IfNotPresent")
	k.poll("the report-only pod, pulled from the registry, Ready", 10*time.Minute, func(ctx context.Context) (bool, error) {
		return k.getPod(ctx) && k.pod.UID != old && podConditionTrue(&k.pod, corev1.PodReady), nil
	})
	st = k.pod.Status.ContainerStatuses[0]
	t.Logf("helm upgrade oci://… to the registry's image -> pod Ready %.1f s: image %s, imageID %s",
		time.Since(upgrade).Seconds(), st.Image, st.ImageID)
	wantImage := guestRegistry + "/ipvs-guard/ipvs-guard:" + version
	if st.Image != wantImage || !strings.HasPrefix(st.ImageID, guestRegistry+"/ipvs-guard/ipvs-guard@sha256:") {
		t.Errorf("container image %q (ID %q): want %s pulled from the registry (a repo digest as its ID)", st.Image, st.ImageID, wantImage)
	}
	absent("report-only pod from the registry Ready")

	n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		t.Logf("Node condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	ctl.do("poweroff")
	if err := vm.Wait(3 * time.Minute); err != nil {
		t.Logf("poweroff: %v", err)
	}
}

func readConsole(t *testing.T, vm *nodevm.VM) string {
	t.Helper()
	b, err := os.ReadFile(vm.Console)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lastFact is the rest of the last console line starting with prefix.
func lastFact(console, prefix string) string {
	var last string
	for _, line := range strings.Split(console, "\n") {
		if i := strings.Index(line, prefix); i >= 0 {
			last = strings.TrimSpace(line[i+len(prefix):])
		}
	}
	return last
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

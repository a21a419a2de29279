// SPDX-License-Identifier: Apache-2.0

//go:build node

package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-guard/ipvs-guard/internal/nodevm"
	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// TestKubeletNodeDemo is the node part of `make demo`, told as a timeline:
// `helm install` on the Debian 12 node with the kubelet and containerd, the
// pod loading back a module unloaded under it, and a real reboot in which
// systemd-modules-load loads what the pod declared. It is the start of
// TestKubeletNodeHelmInstall (the same node, chart and scenario), without
// the upgrades, the ARP scenarios and the uninstall.
// It runs only for the demo (hack/test-node.sh --demo sets NODE_DEMO=1):
// the tier's test covers all of it.
func TestKubeletNodeDemo(t *testing.T) {
	if os.Getenv("NODE_DEMO") != "1" {
		t.Skip("the node part of make demo (hack/test-node.sh --demo); TestKubeletNodeHelmInstall covers it")
	}
	fmt.Fprint(os.Stdout, `
======================================================================================
 The chart's pod on a real Debian 12 node
======================================================================================
 A real control plane runs on this machine (kube-apiserver + etcd,
 kube-controller-manager, kube-scheduler v1.37.1). The node is a stock Debian 12 root
 filesystem booted under QEMU with systemd, the kubelet v1.37.1, containerd 2.x and
 kube-proxy in IPVS mode. ipvs-guard is installed with helm, as its users install it.
 Seconds since the control plane started:
`)
	begin := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stdout, "  %6.1fs  %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	k := startKubeletNode(t)
	ctx, cs, vm, ctl := k.ctx, k.cs, k.vm, k.ctl
	say("the kubelet registered Node %s and reports it Ready (QEMU started %.0fs earlier)", nodevm.NodeName, k.nodeReady.Sub(k.started).Seconds())
	console, err := os.ReadFile(vm.Console)
	if err != nil {
		t.Fatal(err)
	}
	b1 := facts(string(console))[1]
	say("on the node: IPVS modules loaded at boot: %q; AppArmor enabled: %s", strings.TrimSpace(b1["loaded"]), strings.TrimSpace(b1["apparmor"]))

	say("helm install ipvs-guard deploy/ipvs-guard (chart defaults: remediation on, the image built from the Dockerfile)")
	install, running, ready, published := k.helmInstall()
	say("the scheduler bound the pod, containerd started it: Running after %.0fs, Ready after %.0fs", running.Sub(install).Seconds(), ready.Sub(install).Seconds())
	n, err := cs.CoreV1().Nodes().Get(ctx, nodevm.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	say("%.0fs after helm install, the pod has loaded and declared the IPVS modules; the Node's conditions:", published.Sub(install).Seconds())
	printConditions(n)
	ctl.do("confinement")
	if raw, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=1 confinement=", 1, 2*time.Minute); err == nil {
		say("the agent's process in the pod: %s", facts(raw)[1]["confinement"])
	}

	say("on the node: modprobe -r ip_vs_wrr (someone unloads a module the pod keeps loaded)")
	say("the kernel's uevent woke the pod, which loaded it back with finit_module: %s", k.unloadUnderPod("ip_vs_wrr"))

	say("on the node: reboot")
	restarts := k.pod.Status.ContainerStatuses[0].RestartCount
	ctl.do("reboot")
	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=2 begin=", 1, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	rebooted := time.Now()
	// The boot's facts follow its begin line; apparmor is the last of them.
	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=2 apparmor=", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if console, err = os.ReadFile(vm.Console); err != nil {
		t.Fatal(err)
	}
	b2 := facts(string(console))[2]
	say("the node is back up; before containerd, the kubelet and kube-proxy started, systemd-modules-load read /etc/modules-load.d/ipvs.conf (written by the pod):")
	say("  loaded: %s", strings.TrimSpace(b2["loaded"]))
	say("  systemd-modules-load: %s", strings.TrimSpace(b2["modules-load"]))
	k.poll("the pod Running and Ready again after the reboot", 10*time.Minute, func(ctx context.Context) (bool, error) {
		if !k.getPod(ctx) || !podConditionTrue(&k.pod, corev1.PodReady) || len(k.pod.Status.ContainerStatuses) != 1 {
			return false, nil
		}
		st := k.pod.Status.ContainerStatuses[0]
		return st.State.Running != nil && (st.RestartCount > restarts || st.State.Running.StartedAt.After(rebooted)), nil
	})
	say("the kubelet restarted the pod: Ready %.0fs after the node came back", time.Since(rebooted).Seconds())
	k.poll("all four conditions False after the reboot", 5*time.Minute, func(ctx context.Context) (bool, error) {
		n, err = cs.CoreV1().Nodes().Get(ctx, nodevm.NodeName, metav1.GetOptions{})
		return err == nil && allFalse(n) && nodeConditionTrue(n, corev1.NodeReady), nil
	})
	say("all four conditions False again, %.0fs after the node came back; nothing was lost in the reboot", time.Since(rebooted).Seconds())
	printConditions(n)
	if got, want := strings.TrimSpace(b2["loaded"]), "ip_vs ip_vs_rr ip_vs_sh ip_vs_wrr nf_conntrack"; got != want {
		t.Errorf("loaded at boot 2 before containerd, the kubelet and kube-proxy started: %q, want %q", got, want)
	}
	ctl.do("poweroff")
	if err := vm.Wait(3 * time.Minute); err != nil {
		t.Logf("poweroff: %v", err)
	}
	say("node part done")
}

// printConditions prints ipvs-guard's four conditions of n.
func printConditions(n *corev1.Node) {
	for _, c := range n.Status.Conditions {
		for _, ty := range nodestatus.AllConditionTypes() {
			if c.Type == corev1.NodeConditionType(ty) {
				fmt.Fprintf(os.Stdout, "            %-24s %-5s %-22s %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
}

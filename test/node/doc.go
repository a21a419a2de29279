// SPDX-License-Identifier: Apache-2.0

// Package node is the node tier (`make test-node`, hack/test-node.sh).
//
// The control plane (cluster_test.go): the chart installed with
// `helm install` into kube-apiserver + etcd, kube-controller-manager and
// kube-scheduler v1.37.1 on the host (internal/apiservertest,
// internal/controlplanetest), where the DaemonSet controller creates the
// agent's pod, the scheduler binds it to the Node, the root CA publisher
// gives the namespace kube-root-ca.crt (which the pod's projected token
// volume needs), and `helm uninstall` lets the garbage collector delete the
// pod. No kubelet runs there: the Node is registered by the test.
//
// The node (reboot_test.go): the stock Debian 12 root filesystem of
// hack/node/rootfs.sh booted under QEMU (internal/nodevm), systemd as PID 1,
// `ipvs-guard diagnose --fix` on Debian's own modules-load.d layout, then a
// real reboot of the guest after which systemd-modules-load loads what
// ipvs-guard declared. The guest side is testdata/node-scenario, run once per
// boot by a systemd unit.
//
// The agent on the node (agent_test.go): `ipvs-guard run` (a systemd unit
// with the chart's capabilities and flags) and kube-proxy v1.37.1 in IPVS
// mode (a host-process unit, as RKE runs it) on the Debian node, talking to
// the host's API server over QEMU's user network: the agent loads and
// declares the modules kube-proxy cannot start without, all four conditions
// end False; after a real reboot systemd-modules-load loads them before
// kube-proxy and the agent start, and the conditions are published False
// again; with 1,000 LoadBalancer Services the agent's cgroup memory.peak
// stays under the chart's limit.
//
// The chart on a kubelet node (kubelet_test.go): the same control plane with
// the Node authorizer and NodeRestriction, and the Debian node running
// containerd 2.x with Debian's runc, the kubelet with its node identity and
// kube-proxy in IPVS mode (internal/nodevm KubeletFiles). The kubelet
// registers the Node; `helm install` runs the chart's pod under
// containerd/runc with everything the chart says (capabilities,
// readOnlyRootFilesystem, RuntimeDefault seccomp, hostPath mounts, probes,
// the kubelet-issued projected token the own-node admission policy checks).
// The pod loads the IPVS modules kube-proxy waits for, reaches the API server
// through kube-proxy's ClusterIP and publishes all four conditions False; a
// module unloaded under the running pod is reported and loaded back. The
// guest side is testdata/node-kubelet-scenario, which takes its steps from
// the test over a small HTTP control server.
//
// The tests carry the build tag node.
package node

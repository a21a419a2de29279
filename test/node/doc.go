// SPDX-License-Identifier: Apache-2.0

// Package node is the node tier (`make test-node`, hack/test-node.sh): the
// chart installed with `helm install` into a real control plane —
// kube-apiserver + etcd, kube-controller-manager and kube-scheduler v1.37.1
// on the host (internal/apiservertest, internal/controlplanetest) — where
// the DaemonSet controller creates the agent's pod, the scheduler binds it to
// the Node, the root CA publisher gives the namespace kube-root-ca.crt (which
// the pod's projected token volume needs), and `helm uninstall` lets the
// garbage collector delete the pod. No kubelet runs yet: the Node is
// registered by the test.
//
// The tests carry the build tag node.
package node

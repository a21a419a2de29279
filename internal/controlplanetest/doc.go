// SPDX-License-Identifier: Apache-2.0

// Package controlplanetest runs the real kube-controller-manager and
// kube-scheduler (v1.37.1, built by hack/apiserver/install.sh) against an
// apiservertest.Server, so a DaemonSet gets its pods from the DaemonSet
// controller and the scheduler binds them, as in a cluster.
//
// Each component authenticates as its own bootstrap user
// (system:kube-controller-manager, system:kube-scheduler) with a static
// token of the API server (apiservertest.Options.Users, which
// ServerOptions fills in), so it runs with the RBAC role Kubernetes gives it,
// not as an admin. The controller manager signs service-account tokens with
// the API server's key, publishes kube-root-ca.crt in every namespace from
// the API server's CA, and runs each controller with its own service
// account (--use-service-account-credentials), as kubeadm configures it.
//
// It owns process lifecycle only; it creates no API objects.
package controlplanetest

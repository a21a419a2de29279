// SPDX-License-Identifier: Apache-2.0

// Package apiservertest runs a real etcd and kube-apiserver on 127.0.0.1
// free ports for tests (RECIPES §2): static token authentication with an
// admin token in system:masters, RBAC authorization, service-account token
// signing (so TokenRequest works), no endpoint reconciler.
//
// The binaries come from hack/apiserver/install.sh (etcd from Debian, a
// kube-apiserver built once into $IPVS_GUARD_CACHE); Start skips the test
// when they are missing, or fails it under CI=true.
//
// It owns process lifecycle only; it creates no API objects.
package apiservertest

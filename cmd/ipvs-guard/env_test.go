// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"testing"
)

// TestMain runs the package's tests without the cluster the environment
// may name ($KUBECONFIG, a pod's KUBERNETES_SERVICE_HOST): diagnose falls
// back to them, and a test names the cluster it wants itself.
func TestMain(m *testing.M) {
	for _, v := range []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		os.Unsetenv(v)
	}
	os.Exit(m.Run())
}

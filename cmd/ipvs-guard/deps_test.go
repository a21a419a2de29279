// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLeavesOutClientset keeps client-go's clientset, its informers
// and its Event broadcaster out of the binary: each registers every API
// group's types at init, about 13 MB of binary and 14 MiB of memory in every
// agent (pkg/kube serves the few resources ipvs-guard uses).
func TestBinaryLeavesOutClientset(t *testing.T) {
	// go test puts the go command that runs it first in PATH.
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/tools/events", "k8s.io/client-go/discovery"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("ipvs-guard links %s", pkg)
			}
		}
	}
}

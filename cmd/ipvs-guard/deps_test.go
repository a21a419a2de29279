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

// TestLayers keeps the dependencies one way: the cluster view and the
// checks never import the loop, and the loop imports no check (it runs
// what checkset built) and reads the cluster only through the view.
func TestLayers(t *testing.T) {
	const mod = "github.com/ipvs-guard/ipvs-guard/"
	below := []string{"pkg/clusterview", "pkg/checkset", "pkg/arpcheck/...", "pkg/ipvscheck/...", "pkg/arpsysctl", "pkg/kubeproxy", "pkg/modules", "pkg/nodestatus/..."}
	args := []string{"list", "-deps"}
	for _, p := range below {
		args = append(args, mod+p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == mod+"pkg/agent" {
			t.Errorf("pkg/agent is a dependency of %v", below)
		}
	}
	out, err = exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, mod+"pkg/agent").Output()
	if err != nil {
		t.Fatalf("go list pkg/agent: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, check := range []string{"pkg/arpcheck", "pkg/ipvscheck", "pkg/arpsysctl", "pkg/kubeproxy", "pkg/modules", "pkg/checkset"} {
			if pkg == mod+check || strings.HasPrefix(pkg, mod+check+"/") {
				t.Errorf("pkg/agent imports %s", pkg)
			}
		}
	}
}

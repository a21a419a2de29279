// SPDX-License-Identifier: Apache-2.0

// Package ipvsguardtest provides the ipvs-guard binary under test to tests
// that run it as a process (the chart's flags, the agent scraped by promtool,
// diagnose inside a network namespace): one way to get it, so every tier
// runs the same build.
//
// It is test support only: nothing outside *_test.go files may import it.
package ipvsguardtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Package is the import path of the ipvs-guard command.
const Package = "github.com/ipvs-guard/ipvs-guard/cmd/ipvs-guard"

// Binary returns the ipvs-guard binary to run: $IPVS_GUARD_BIN when set
// (a prebuilt binary, as in the guest), else one built now from this
// checkout, statically (CGO_ENABLED=0, as `make build`), into t.TempDir().
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("IPVS_GUARD_BIN"); b != "" {
		return b
	}
	bin := filepath.Join(t.TempDir(), "ipvs-guard")
	build := exec.Command("go", "build", "-o", bin, Package)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ipvs-guard: %v\n%s", err, out)
	}
	return bin
}

// SPDX-License-Identifier: Apache-2.0

// Package testenv gates tests that need real components (root, network
// namespaces, the guest kernel, the API server). On a developer's machine a
// missing prerequisite skips the test; under CI=true it fails it, so a broken
// CI machine can never pass by skipping.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips (or, in CI, fails) the test when ok is false.
func Require(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("missing prerequisite under CI=true: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

// RequireRoot skips (or fails in CI) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "test needs root")
}

// Tool returns the program named by the environment variable env (set by
// the tier's entry script, e.g. HELM), else name on $PATH; without either
// the test is skipped (failed in CI) with the hint how to get it.
func Tool(t testing.TB, env, name, how string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p, _ = exec.LookPath(name)
	}
	Require(t, p != "", "no "+name+": set "+env+" ("+how+")")
	return p
}

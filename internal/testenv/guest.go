// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"testing"
)

// GuestMarkerDir is the directory the guest kernel's /init creates before it
// runs any test (hack/guest/init.sh); its presence means the test runs inside
// the project's QEMU guest, where it may load and unload kernel modules and
// rewrite /etc freely.
const GuestMarkerDir = "/run/ipvs-guard-guest"

// InGuest reports whether the process runs inside the project's guest kernel.
func InGuest() bool {
	fi, err := os.Stat(GuestMarkerDir)
	return err == nil && fi.IsDir()
}

// RequireGuest skips (or, under CI=true, fails) the test unless it runs inside
// the guest kernel. Every test built with the `guest` tag calls it first: such
// tests change the kernel and /etc and must never run on a developer's host.
func RequireGuest(t testing.TB) {
	t.Helper()
	Require(t, InGuest(), "test needs the guest kernel (run it with `make test-guest`)")
}

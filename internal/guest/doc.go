// SPDX-License-Identifier: Apache-2.0

// Package guest holds helpers for tests that run inside the project's QEMU
// guest kernel (tests built with the `guest` build tag, see hack/guest/README.md):
// reading and resetting the loaded kernel modules, running the ipvs-guard
// binary under test, and reading the log of the guest's modprobe tripwire.
//
// It is test support only: nothing outside *_test.go files may import it, and
// its functions assume they run in the disposable guest (they unload modules
// and overwrite files under /etc). Every test using it calls
// testenv.RequireGuest first.
package guest

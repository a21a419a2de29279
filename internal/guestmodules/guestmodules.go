// SPDX-License-Identifier: Apache-2.0

// Package guestmodules loads kernel modules in the guest-kernel tier with the
// project's native loader. It lives apart from internal/guest so that
// pkg/modules' own guest tests can use internal/guest without an import cycle.
package guestmodules

import (
	"context"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// LoadNative loads modules with the project's native loader (the guest's
// kernel modprobe helper is off, so `ip link add … type dummy` cannot
// autoload a driver) and fails the test unless they end up loaded.
func LoadNative(t testing.TB, names ...string) {
	t.Helper()
	l, err := modules.NewNativeLoader(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(context.Background(), names); err != nil {
		t.Fatalf("loading %v: %v", names, err)
	}
	guest.RequireLoaded(t, names...)
}

// SPDX-License-Identifier: Apache-2.0

//go:build guest

package main_test

import (
	"os"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// BenchmarkGuestLoadIPVSSet loads the full IPVS set (default scheduler) into
// the guest kernel from nothing, once per iteration, with ipvs-guard
// (`diagnose --fix`: detection, native loading and the declaration file) and
// with kmod's `modprobe -a` of the same modules. Modules are unloaded between
// iterations outside the timer. `make bench-guest` prints the ratio.
func BenchmarkGuestLoadIPVSSet(b *testing.B) {
	testenv.RequireGuest(b)
	loaders := []struct {
		name string
		run  func(b *testing.B) guest.Result
	}{
		{"ipvs-guard", func(b *testing.B) guest.Result { return guest.IPVSGuard(b, "diagnose", "--fix") }},
		{"kmod-modprobe", func(b *testing.B) guest.Result {
			return guest.Run(b, guest.KmodModprobe, append([]string{"-a"}, required...)...)
		}},
	}
	for _, l := range loaders {
		b.Run(l.name, func(b *testing.B) {
			reset := func() {
				guest.ResetModules(b)
				if err := os.Remove(ownedConf); err != nil && !os.IsNotExist(err) {
					b.Fatal(err)
				}
			}
			reset()
			b.ResetTimer()
			for range b.N {
				r := l.run(b)
				b.StopTimer()
				if r.ExitCode != 0 {
					b.Fatalf("%s failed:\n%s", l.name, r)
				}
				guest.RequireLoaded(b, closure...)
				reset()
				b.StartTimer()
			}
		})
	}
}

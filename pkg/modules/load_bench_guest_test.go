// SPDX-License-Identifier: Apache-2.0

//go:build guest

package modules_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// BenchmarkGuestLoadIPVSSet loads the full IPVS set (default scheduler) into
// the guest kernel from nothing, side by side:
//
//   - ipvs-guard: the binary, `diagnose --fix` (detection, native loading and
//     the declaration file; what an operator runs);
//   - native-loader: ipvs-guard's loader in process (modules.NewNativeLoader
//     reading the indexes, then Load): no process start, no detection;
//   - kmod: kmod's `modprobe -a` of the same modules (the peer);
//   - ipvs-guard-version: `ipvs-guard version`, the binary's bare start-up,
//     to tell process start from work.
//
// Every iteration runs each of them once, in a rotating order, from a kernel
// with none of the modules loaded, so load on the host hits all alike. It
// reports each one's mean as <name>-ms/op and the ratios to kmod; ns/op is
// the whole iteration and means nothing alone. `make bench-guest` prints them.
func BenchmarkGuestLoadIPVSSet(b *testing.B) {
	testenv.RequireGuest(b)
	ctx := context.Background()
	type loader struct {
		name  string
		run   func() error
		loads bool
	}
	loaders := []loader{
		{"ipvs-guard", func() error {
			if r := guest.IPVSGuard(b, "diagnose", "--fix", "--assume-proxy-mode", "ipvs"); r.ExitCode != 0 {
				return fmt.Errorf("diagnose --fix failed:\n%s", r)
			}
			return nil
		}, true},
		{"native-loader", func() error {
			l, err := modules.NewNativeLoader(hostfs.New("/"))
			if err != nil {
				return err
			}
			_, err = l.Load(ctx, required)
			return err
		}, true},
		{"kmod", func() error {
			if r := guest.Run(b, guest.KmodModprobe, append([]string{"-a"}, required...)...); r.ExitCode != 0 {
				return fmt.Errorf("kmod modprobe failed:\n%s", r)
			}
			return nil
		}, true},
		{"ipvs-guard-version", func() error {
			if r := guest.IPVSGuard(b, "version"); r.ExitCode != 0 {
				return fmt.Errorf("version failed:\n%s", r)
			}
			return nil
		}, false},
	}
	reset := func() {
		guest.ResetModules(b)
		if err := os.Remove(ownedConf); err != nil && !os.IsNotExist(err) {
			b.Fatal(err)
		}
	}
	total := make([]time.Duration, len(loaders))
	reset()
	b.ResetTimer()
	for i := range b.N {
		for j := range loaders {
			k := (i + j) % len(loaders)
			l := loaders[k]
			start := time.Now()
			err := l.run()
			total[k] += time.Since(start)
			if err != nil {
				b.Fatalf("%s: %v", l.name, err)
			}
			if l.loads {
				guest.RequireLoaded(b, closure...)
			}
			reset()
		}
	}
	ms := func(k int) float64 { return float64(total[k].Milliseconds()) / float64(b.N) }
	for k, l := range loaders {
		b.ReportMetric(ms(k), l.name+"-ms/op")
	}
	b.ReportMetric(ms(0)/ms(2), "ratio-ipvs-guard/kmod")
	b.ReportMetric(ms(1)/ms(2), "ratio-native-loader/kmod")
}

// BenchmarkGuestNativeLoaderSetup is the part of native-loader spent reading
// the kernel's module indexes and modprobe.d before anything is loaded.
func BenchmarkGuestNativeLoaderSetup(b *testing.B) {
	testenv.RequireGuest(b)
	for range b.N {
		if _, err := modules.NewNativeLoader(hostfs.New("/")); err != nil {
			b.Fatal(err)
		}
	}
}

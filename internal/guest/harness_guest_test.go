// SPDX-License-Identifier: Apache-2.0

//go:build guest

package guest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// ipvsSet is the module set the harness itself proves it can load and unload.
var ipvsSet = []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack", "nf_defrag_ipv4", "nf_defrag_ipv6", "libcrc32c"}

// TestGuestHarness proves what every other guest test relies on: the kernel's
// modprobe helper is off, the modprobe tripwire records callers, kmod and
// systemd-modules-load work against depmod's indexes, and ResetModules brings
// the kernel back to the state it booted in.
func TestGuestHarness(t *testing.T) {
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	t.Cleanup(func() { guest.ResetModules(t) })

	t.Run("kernel modprobe helper is off", func(t *testing.T) {
		data, err := os.ReadFile("/proc/sys/kernel/modprobe")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(data)); got != "" {
			t.Fatalf("/proc/sys/kernel/modprobe = %q, want empty", got)
		}
		// Creating a dummy link would make the kernel request the module.
		r := guest.Run(t, "ip", "link", "add", "harness0", "type", "dummy")
		if r.ExitCode == 0 {
			t.Fatalf("creating a dummy link without the dummy module succeeded:\n%s", r)
		}
		guest.RequireNotLoaded(t, "dummy")
	})

	t.Run("modprobe tripwire records callers", func(t *testing.T) {
		guest.ClearModprobeCalls(t)
		// ipvsadm runs `modprobe -- ip_vs` when IPVS is missing.
		r := guest.Run(t, "ipvsadm", "-Ln")
		if r.ExitCode == 0 {
			t.Fatalf("ipvsadm without ip_vs succeeded:\n%s", r)
		}
		calls := guest.ModprobeCalls(t)
		if len(calls) != 1 || !strings.Contains(calls[0], "ip_vs") {
			t.Fatalf("tripwire calls = %q, want one naming ip_vs", calls)
		}
		guest.RequireNotLoaded(t, "ip_vs")
		guest.ClearModprobeCalls(t)
	})

	t.Run("kmod loads the IPVS set and ResetModules unloads it", func(t *testing.T) {
		r := guest.Run(t, guest.KmodModprobe, "-a", "ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack")
		if r.ExitCode != 0 {
			t.Fatalf("kmod modprobe failed:\n%s", r)
		}
		guest.RequireLoaded(t, ipvsSet...)
		if r := guest.Run(t, "ipvsadm", "-Ln"); r.ExitCode != 0 {
			t.Fatalf("ipvsadm with ip_vs loaded failed:\n%s", r)
		}
		guest.ResetModules(t)
		guest.RequireNotLoaded(t, ipvsSet...)
	})

	t.Run("systemd-modules-load loads a modules-load.d file", func(t *testing.T) {
		dir := "/run/modules-load.d"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "harness.conf")
		if err := os.WriteFile(conf, []byte("# harness\nip_vs\nip_vs_wrr\ndummy\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(conf) })
		// Its exit code is not trusted: it exits 0 even when it loads nothing.
		guest.Run(t, guest.SystemdModulesLoad)
		guest.RequireLoaded(t, "ip_vs", "ip_vs_wrr", "dummy", "nf_conntrack", "libcrc32c")
		guest.ResetModules(t)
	})

	t.Run("ipvs-guard under test runs", func(t *testing.T) {
		r := guest.IPVSGuard(t, "version")
		if r.ExitCode != 0 {
			t.Fatalf("ipvs-guard version failed:\n%s", r)
		}
	})

	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("unexpected modprobe calls: %q", calls)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build guest

package nftready

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
)

// TestGuestProveKernelLoadsNoIPVS: `diagnose --target-mode nftables
// --prove-kernel` proves kube-proxy's nf_tables expressions on the guest's
// kernel and shows each one, with the kernel's version, as an ok finding;
// it loads no IPVS module, declares nothing and runs no modprobe.
func TestGuestProveKernelLoadsNoIPVS(t *testing.T) {
	guest.ResetModules(t)
	t.Cleanup(func() { guest.ResetModules(t) })
	guest.ClearModprobeCalls(t)
	os.Remove("/etc/modules-load.d/ipvs.conf")
	// The guest's kernel cannot load modules itself (its modprobe helper is
	// a tripwire): load what the probe needs as the kernel would.
	var all []string
	for _, e := range Expressions {
		for _, m := range ExprModules[e] {
			if !slices.Contains(all, m) {
				all = append(all, m)
			}
		}
	}
	loadModules(t, all...)

	r := guest.IPVSGuard(t, "diagnose", "-o", "json", "--node-name", "guest", "--target-mode", "nftables", "--prove-kernel",
		"--kube-proxy-metrics-address", "127.0.0.1:1")
	var rep struct {
		Checks []struct {
			Name     string
			Status   string
			Findings []Finding
		}
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, r)
	}
	var ok []string
	for _, c := range rep.Checks {
		if c.Name != "nftables-readiness" {
			continue
		}
		for _, f := range c.Findings {
			if f.Severity == SeverityOK {
				ok = append(ok, f.Kind+" "+f.Object)
			}
		}
	}
	osrel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{KindKernelVersion + " " + strings.TrimSpace(string(osrel))}
	for _, e := range Expressions {
		want = append(want, KindNFTExpression+" "+e)
	}
	if !slices.Equal(ok, want) {
		t.Errorf("ok findings %q, want %q\n%s", ok, want, r)
	}
	guest.RequireNotLoaded(t, "ip_vs")
	if _, err := os.Stat("/etc/modules-load.d/ipvs.conf"); err == nil {
		t.Error("--prove-kernel declared the IPVS modules")
	}
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("modprobe called: %q", calls)
	}
}

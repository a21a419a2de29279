// SPDX-License-Identifier: Apache-2.0

//go:build node

package node

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
	"github.com/ipvs-guard/ipvs-guard/internal/nodevm"
)

// report is the part of `ipvs-guard diagnose -o json` the scenario reads.
type report struct {
	Checks []struct {
		Name     string `json:"name"`
		Status   string `json:"status"`
		Reason   string `json:"reason"`
		Findings []struct {
			Module   string `json:"module"`
			Loaded   bool   `json:"loaded"`
			Declared bool   `json:"declared"`
		} `json:"findings"`
	} `json:"checks"`
}

// modulesCheck returns the modules check's status, reason and the modules
// it finds not loaded and not declared.
func modulesCheck(t *testing.T, raw string) (status, reason string, notLoaded, notDeclared []string) {
	t.Helper()
	var r report
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("diagnose -o json: %v\n%s", err, raw)
	}
	for _, c := range r.Checks {
		if c.Name != "modules" {
			continue
		}
		for _, f := range c.Findings {
			if !f.Loaded {
				notLoaded = append(notLoaded, f.Module)
			}
			if !f.Declared {
				notDeclared = append(notDeclared, f.Module)
			}
		}
		return c.Status, c.Reason, notLoaded, notDeclared
	}
	t.Fatalf("no modules check in %s", raw)
	return
}

var factRE = regexp.MustCompile(`NODE-SCENARIO boot=(\d+) ([a-z.-]+)=(.*)`)

// facts parses the scenario's console lines into boot -> key -> value; the
// lines of a long value, reported in pieces, are joined in order.
func facts(console string) map[int]map[string]string {
	out := map[int]map[string]string{}
	for _, line := range strings.Split(console, "\n") {
		m := factRE.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		boot, _ := strconv.Atoi(m[1])
		if out[boot] == nil {
			out[boot] = map[string]string{}
		}
		out[boot][m[2]] += m[3]
	}
	return out
}

// TestDebianNodeReboot boots the stock Debian 12 node (systemd as PID 1,
// Debian's /etc with modules.conf -> ../modules), runs `ipvs-guard diagnose`
// (the modules check must work on that layout), `diagnose --fix` (loads the
// IPVS modules and declares them in /etc/modules-load.d/ipvs.conf), then
// reboots the guest for real: systemd-modules-load must load what was
// declared, and diagnose finds nothing missing.
func TestDebianNodeReboot(t *testing.T) {
	const dir = "testdata"
	vm := nodevm.Start(t, nodevm.Options{Files: map[string]nodevm.File{
		"/usr/local/bin/ipvs-guard":                                         {Source: ipvsguardtest.Binary(t), Mode: 0o755},
		"/usr/local/sbin/node-scenario":                                     {Source: filepath.Join(dir, "node-scenario"), Mode: 0o755},
		"/etc/systemd/system/node-scenario.service":                         {Source: filepath.Join(dir, "node-scenario.service")},
		"/etc/systemd/system/multi-user.target.wants/node-scenario.service": {Link: "/etc/systemd/system/node-scenario.service"},
	}})
	start := time.Now()
	ctx := context.Background()
	if _, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=1 done=", 1, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	firstBoot := time.Since(start)
	console, err := vm.WaitConsole(ctx, "NODE-SCENARIO boot=2 done=", 1, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rebooted := time.Since(start) - firstBoot
	if err := vm.Wait(time.Minute); err != nil {
		t.Errorf("the node did not power off: %v", err)
	}
	f := facts(console)
	b1, b2 := f[1], f[2]

	for _, b := range f {
		for k, v := range b {
			b[k] = strings.TrimSpace(v)
		}
	}
	if got := b1["modules.conf"]; got != "../modules" {
		t.Errorf("Debian's /etc/modules-load.d/modules.conf links to %q, want ../modules", got)
	}
	if b1["loaded"] != "" {
		t.Errorf("IPVS modules loaded before ipvs-guard ran: %q", b1["loaded"])
	}
	required := []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}
	status, reason, notLoaded, _ := modulesCheck(t, b1["diagnose"])
	if status != "problem" || reason != "ModulesNotLoaded" {
		t.Errorf("first diagnose on stock Debian: modules %s/%s, want problem/ModulesNotLoaded (a check must never fail on a layout systemd accepts)", status, reason)
	}
	if diff := cmp.Diff(required, notLoaded); diff != "" {
		t.Errorf("first diagnose: modules not loaded (-want +got):\n%s", diff)
	}
	status, reason, notLoaded, notDeclared := modulesCheck(t, b1["after-fix"])
	if status != "ok" || len(notLoaded)+len(notDeclared) > 0 {
		t.Errorf("after --fix: modules %s/%s, not loaded %v, not declared %v", status, reason, notLoaded, notDeclared)
	}
	t.Logf("ipvs.conf written by --fix: %s", b1["ipvs.conf"])

	// After the reboot: systemd-modules-load loaded the declaration.
	want := "ip_vs ip_vs_rr ip_vs_sh ip_vs_wrr nf_conntrack"
	if got := b2["loaded"]; got != want {
		t.Errorf("IPVS modules loaded after the reboot: %q, want %q", got, want)
	}
	status, reason, notLoaded, notDeclared = modulesCheck(t, b2["diagnose"])
	if status != "ok" || len(notLoaded)+len(notDeclared) > 0 {
		t.Errorf("after the reboot: modules %s/%s, not loaded %v, not declared %v", status, reason, notLoaded, notDeclared)
	}
	t.Logf("first boot to scenario done: %.1f s; reboot to scenario done: %.1f s (guest uptime at the scenario: %s s)",
		firstBoot.Seconds(), rebooted.Seconds(), b2["uptime"])
	t.Logf("systemd-modules-load after the reboot: %s; log: %s", b2["modules-load-unit"], b2["modules-load"])
	if got := b2["modules-load-unit"]; !strings.Contains(got, "ActiveState=active") || !strings.Contains(got, "Result=success") {
		t.Errorf("systemd-modules-load.service after the reboot: %q, want active and success", got)
	}
	if got := b2["modules-load"]; !strings.Contains(got, "Inserted module 'ip_vs'") {
		t.Errorf("systemd-modules-load's log after the reboot does not say it inserted ip_vs: %q", got)
	}
}

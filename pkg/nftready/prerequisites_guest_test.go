// SPDX-License-Identifier: Apache-2.0

//go:build guest && linux

package nftready

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// guestModprobeFile is the modprobe.d file the tests write.
const guestModprobeFile = "/etc/modprobe.d/x.conf"

// nftablesMode stands in for kube-proxy's /proxyMode: the nftables tier
// proves the mode reading against the real kube-proxy.
func nftablesMode(context.Context) (string, error) { return kubeproxy.ModeNFTables, nil }

// runPrerequisites runs the check on the guest's own root.
func runPrerequisites(t *testing.T) check.Result {
	t.Helper()
	c, err := NewPrerequisitesChecker(PrerequisitesConfig{Host: HostSources(hostfs.New("/")), Mode: nftablesMode})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s: %s; remediation %q", res.Status, res.Reason, res.Message, res.Remediation)
	return res
}

// prerequisite returns the finding about module m.
func prerequisite(res check.Result, m string) (Prerequisite, bool) {
	for _, f := range res.Findings {
		if p, ok := f.(Prerequisite); ok && p.Module == m {
			return p, true
		}
	}
	return Prerequisite{}, false
}

func writeModprobe(t *testing.T, content string) {
	t.Helper()
	if err := os.MkdirAll("/etc/modprobe.d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(guestModprobeFile, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// kmodProbe runs kmod's real modprobe, the judge of what modprobe.d
// blocks: the kernel's own autoloading calls it with the alias.
func kmodProbe(t *testing.T, args ...string) guest.Result {
	t.Helper()
	r := guest.Run(t, guest.KmodModprobe, args...)
	t.Logf("%s → exit %d %s", strings.Join(r.Args, " "), r.ExitCode, strings.TrimSpace(r.Stderr))
	return r
}

// TestGuestNFTablesPrerequisites runs the nftables-prerequisites check on
// a stock Debian kernel whose nf_tables is modules, kube-proxy in nftables
// mode, each verdict held against the kernel and kmod's modprobe:
//
//   - every module loaded: the kernel builds every expression kube-proxy
//     uses (the probe), and the check is ok;
//   - /etc/modprobe.d/x.conf blacklists nft_numgen while it is loaded: a
//     problem for the next boot, naming the file and the line; unloaded,
//     kmod's modprobe of the alias the kernel asks for (nft-expr-numgen)
//     loads nothing, and the check says the kernel does not load it;
//   - "install nft_numgen /bin/false": kmod's modprobe fails and the check
//     names the line;
//   - "blacklist nf_conntrack": kmod still inserts it as nft_ct's
//     dependency, and the check is ok.
func TestGuestNFTablesPrerequisites(t *testing.T) {
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	t.Cleanup(func() {
		_ = os.Remove(guestModprobeFile)
		guest.ResetModules(t)
	})
	_ = os.Remove(guestModprobeFile)
	loadModules(t, NeededModules()...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := NetNSProber{}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.Err != nil {
			t.Errorf("kernel refused %s with every module loaded: %v", r.Expression, r.Err)
		}
	}
	if res := runPrerequisites(t); res.Status != check.StatusOK || res.Reason != ReasonPrerequisitesMet {
		t.Fatalf("every module loaded: %s %s", res.Status, res.Reason)
	}

	writeModprobe(t, "# hardening baseline\nblacklist nft_numgen\n")
	res := runPrerequisites(t)
	p, ok := prerequisite(res, "nft_numgen")
	if res.Status != check.StatusProblem || res.Reason != ReasonModuleBlocked || !ok || !p.Loaded || p.File != guestModprobeFile || p.Line != "blacklist nft_numgen" ||
		!strings.Contains(res.Message, "it is loaded now, but the kernel will not load it after the next boot") ||
		len(res.Remediation) != 1 || !slices.Equal(res.Remediation[0], check.Step{`Remove the line "blacklist nft_numgen" from /etc/modprobe.d/x.conf.`}) {
		t.Errorf("blacklisted while loaded: %s %s %+v", res.Status, res.Reason, res.Findings)
	}

	if r := guest.Run(t, "/usr/libexec/kmod/rmmod", "nft_numgen"); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	kmodProbe(t, "nft-expr-numgen")
	if guest.LoadedModules(t)["nft_numgen"] {
		t.Fatal("kmod loaded the blacklisted nft_numgen through its alias: the blacklist does not block it")
	}
	res = runPrerequisites(t)
	if p, ok := prerequisite(res, "nft_numgen"); res.Reason != ReasonModuleBlocked || !ok || p.Loaded || !strings.Contains(res.Message, "the kernel does not load it") {
		t.Errorf("blacklisted, not loaded: %s %s %+v", res.Status, res.Reason, res.Findings)
	}

	writeModprobe(t, "install nft_numgen /bin/false\n")
	if r := kmodProbe(t, "nft_numgen"); r.ExitCode == 0 || guest.LoadedModules(t)["nft_numgen"] {
		t.Fatalf("kmod loaded nft_numgen despite its install command: %s", r)
	}
	res = runPrerequisites(t)
	if p, ok := prerequisite(res, "nft_numgen"); res.Reason != ReasonModuleBlocked || !ok || p.Line != "install nft_numgen /bin/false" || p.File != guestModprobeFile {
		t.Errorf("install command: %s %s %+v", res.Status, res.Reason, res.Findings)
	}

	// A blacklisted dependency: kmod inserts it with the module that
	// needs it, so it blocks nothing.
	guest.ResetModules(t)
	loadModules(t, "nf_tables")
	writeModprobe(t, "blacklist nf_conntrack\n")
	if res := runPrerequisites(t); res.Status != check.StatusOK {
		t.Errorf("blacklisted dependency: %s %s", res.Status, res.Reason)
	}
	if r := kmodProbe(t, "nft-expr-ct"); r.ExitCode != 0 {
		t.Fatalf("%s", r)
	}
	guest.RequireLoaded(t, "nft_ct", "nf_conntrack")
}

// TestGuestLastNFTablesModulesDisabled sets kernel.modules_disabled=1 with
// nft_numgen unloaded, as a lockdown sysctl.d file does at boot: the
// kernel then refuses the module (finit_module) and the numgen expression
// (the probe), and the check names the module and the sysctl.d file. It
// cannot be undone until reboot: run-tests.sh runs TestGuestLast* after
// every other guest test, and this one leaves the modules as they are.
func TestGuestLastNFTablesModulesDisabled(t *testing.T) {
	testenv.RequireGuest(t)
	guest.ResetModules(t)
	_ = os.Remove(guestModprobeFile)
	var all []string
	for _, m := range NeededModules() {
		if m != "nft_numgen" {
			all = append(all, m)
		}
	}
	loadModules(t, all...)
	if err := os.MkdirAll("/etc/sysctl.d", 0o755); err != nil {
		t.Fatal(err)
	}
	const lock = "/etc/sysctl.d/99-lockdown.conf"
	if err := os.WriteFile(lock, []byte("kernel.modules_disabled = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(lock) })
	if err := os.WriteFile("/proc/sys/kernel/modules_disabled", []byte("1"), 0o644); err != nil {
		t.Fatalf("setting kernel.modules_disabled: %v", err)
	}

	l, err := modules.NewNativeLoader(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(context.Background(), []string{"nft_numgen"}); err == nil || guest.LoadedModules(t)["nft_numgen"] {
		t.Fatalf("the kernel loaded nft_numgen with kernel.modules_disabled=1 (%v)", err)
	} else {
		t.Logf("kernel refused nft_numgen: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := NetNSProber{}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		refused := r.Err != nil && !errors.Is(r.Err, errPrereq)
		if refused != (r.Expression == ExprNumgen) {
			t.Errorf("%s: %v", r.Expression, r.Err)
		}
	}

	res := runPrerequisites(t)
	p, ok := prerequisite(res, "nft_numgen")
	if res.Status != check.StatusProblem || res.Reason != ReasonModulesDisabled || !ok || p.Kind != PrereqModulesDisabled || len(res.Findings) != 1 ||
		!strings.Contains(res.Message, "kernel.modules_disabled is 1 and nft_numgen is not loaded") ||
		!strings.Contains(strings.Join(res.Remediation[0], " "), "remove the line kernel.modules_disabled = 1 from "+lock) {
		t.Errorf("modules_disabled: %s %s %+v", res.Status, res.Reason, res.Findings)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build guest && linux

package nftready

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

func loadModules(t *testing.T, names ...string) {
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

// TestGuestNFTablesReadiness runs the readiness report and the probe on a
// stock Debian kernel whose nf_tables is modules, with the kernel's modprobe
// helper turned off (a tripwire logs every call):
//
//   - without leave to load modules the probe is held back (no modprobe
//     call) and the module index says every module is shipped;
//   - with every module but nft_numgen loaded, the probe names numgen as
//     the expression the kernel refuses, and only it;
//   - with nft_numgen loaded, every expression is accepted.
func TestGuestNFTablesReadiness(t *testing.T) {
	guest.ResetModules(t)
	t.Cleanup(func() { guest.ResetModules(t) })
	guest.ClearModprobeCalls(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := hostfs.New("/")

	cfg := ReadinessConfig{Host: HostSources(root), Prober: NetNSProber{}}
	res, err := NewReadinessChecker(cfg).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK || !hasFinding(res, KindNFTExpression, SeverityInfo, "") {
		t.Errorf("held-back probe: %s %s\n%v", res.Status, res.Message, res.Findings)
	}
	if calls := guest.ModprobeCalls(t); len(calls) != 0 {
		t.Errorf("the report made the kernel call modprobe: %q", calls)
	}
	t.Logf("held back: %s", res.Message)

	var all []string
	for _, e := range Expressions {
		for _, m := range ExprModules[e] {
			if m != "nft_numgen" && !slices.Contains(all, m) {
				all = append(all, m)
			}
		}
	}
	loadModules(t, all...)
	got, err := NetNSProber{}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		refused := r.Err != nil && !errors.Is(r.Err, errPrereq)
		if refused != (r.Expression == ExprNumgen) {
			t.Errorf("%s: %v", r.Expression, r.Err)
		}
		if r.Err != nil {
			t.Logf("kernel refused %s: %v", r.Expression, r.Err)
		}
	}
	cfg.MayLoadModules = true
	res, err = NewReadinessChecker(cfg).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusProblem || res.Reason != ReasonNotReadyForNftables || !hasFinding(res, KindNFTExpression, SeverityBlocker, ExprNumgen) {
		t.Errorf("without nft_numgen: %s %s\n%v", res.Status, res.Message, res.Findings)
	}

	loadModules(t, "nft_numgen")
	got, err = NetNSProber{}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.Err != nil {
			t.Errorf("%s refused with every module loaded: %v", r.Expression, r.Err)
		}
	}
	res, err = NewReadinessChecker(ReadinessConfig{Host: HostSources(root), Prober: NetNSProber{}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != check.StatusOK || hasFinding(res, KindNFTExpression, "", "") {
		t.Errorf("every module loaded: %s %s\n%v", res.Status, res.Message, res.Findings)
	}
	t.Logf("ready: %s %v", res.Message, res.Findings)
}

// hasFinding reports whether res has a finding of kind (and severity and
// object when not empty).
func hasFinding(res check.Result, kind, severity, object string) bool {
	for _, f := range res.Findings {
		rf, ok := f.(Finding)
		if ok && rf.Kind == kind && (severity == "" || rf.Severity == severity) && (object == "" || rf.Object == object) {
			return true
		}
	}
	return false
}

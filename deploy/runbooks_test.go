// SPDX-License-Identifier: Apache-2.0

package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// runbookBase is the prefix of every runbook_url in files/alerts.yaml; the
// chart's prometheusRule.runbookBaseURL replaces it.
const runbookBase = "https://github.com/ipvs-guard/ipvs-guard/blob/main/docs/runbooks/"

// TestEveryAlertLinksAnExistingRunbook checks that each shipped alert has a
// runbook_url under docs/runbooks/ and that the page exists: for the alert
// whose page depends on the condition reason, every reason it can carry.
func TestEveryAlertLinksAnExistingRunbook(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("ipvs-guard", "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	// Reasons KubeProxyIPVSDegraded can be True with (kube-proxy and ipvs
	// checks) and KubeProxyDataplaneDegraded (kube-proxy-sync,
	// ipvs-dataplane, nftables-dataplane and nftables-prerequisites checks).
	degraded := []string{"ProxyModeNotIPVS", "KubeIPVS0Missing", "IPVSModuleNotLoaded", "VirtualServerMissing", "NoRealServers", "SchedulerMismatch", "CheckFailed"}
	degraded = append(degraded, "KubeProxySyncStale", "KubeProxySyncFailing", "KubeProxyCleanupFailing", "KubeProxySyncSlow",
		"StaleRealServers", "MissingRealServers", "RealServersStuckAtWeightZero",
		"NFTablesTableMissing", "NFTablesObjectsMissing", "NFTablesServiceIPMissing", "NFTablesServiceRejected", "NFTablesStaleEndpoints", "NFTablesMissingEndpoints",
		"NFTablesModulesDisabled", "NFTablesModuleNotInKernel", "NFTablesModuleBlocked")
	// Advisories the ipvs-sysctls alert can carry (pkg/ipvssysctl).
	advisories := []string{"IPVSConnReuseDelay", "IPVSConnReuseStickyBackend", "IPVSExpireNodestConnOff", "IPVSExpireQuiescentTemplateOff", "IPVSConntrackOff", "IPVSTCPTimeoutBelowKeepalive"}
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			url := r.Annotations["runbook_url"]
			page, ok := strings.CutPrefix(url, runbookBase)
			if !ok || !strings.HasSuffix(page, ".md") {
				t.Errorf("%s: runbook_url %q is not %s<page>.md", r.Alert, url, runbookBase)
				continue
			}
			pages := []string{page}
			if strings.Contains(page, "{{ $labels.advisory }}") {
				pages = nil
				for _, a := range advisories {
					pages = append(pages, strings.ReplaceAll(page, "{{ $labels.advisory }}", a))
				}
			}
			if strings.Contains(page, "{{ $labels.reason }}") {
				pages = nil
				for _, reason := range degraded {
					pages = append(pages, strings.ReplaceAll(page, "{{ $labels.reason }}", reason))
				}
			}
			for _, p := range pages {
				if _, err := os.Stat(filepath.Join("..", "docs", "runbooks", p)); err != nil {
					t.Errorf("%s: runbook %s: %v", r.Alert, p, err)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("alerts.yaml has no alerts")
	}
}

// TestEveryRunbookHasItsSections checks that every runbook page says what
// the reason means, who loses what traffic (Impact, as kube-prometheus's
// runbooks do), how to confirm it and how to fix it, in that order.
func TestEveryRunbookHasItsSections(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("..", "docs", "runbooks", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"## What it means", "## Impact", "## How to confirm", "## How to fix"}
	n := 0
	for _, p := range pages {
		if filepath.Base(p) == "README.md" {
			continue
		}
		n++
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		inFence := false
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
			}
			if !inFence && strings.HasPrefix(line, "## ") {
				got = append(got, strings.TrimSpace(line))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: sections %q, want %q", filepath.Base(p), got, want)
			continue
		}
		// The Impact section says something.
		body := string(raw)
		impact := body[strings.Index(body, "## Impact")+len("## Impact") : strings.Index(body, "## How to confirm")]
		if len(strings.Fields(impact)) < 8 {
			t.Errorf("%s: the Impact section is empty or a stub: %q", filepath.Base(p), strings.TrimSpace(impact))
		}
	}
	if n == 0 {
		t.Fatal("no runbook pages found")
	}
}

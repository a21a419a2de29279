// SPDX-License-Identifier: Apache-2.0

package alerttest

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert  string            `json:"alert"`
			Expr   string            `json:"expr"`
			For    string            `json:"for"`
			Labels map[string]string `json:"labels"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestRewriteRules rewrites the chart's own rules: every `for:` becomes the
// given duration and nothing else changes.
func TestRewriteRules(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/ipvs-guard/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := RewriteRules(raw, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var before, after ruleFile
	if err := yaml.Unmarshal(raw, &before); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	if len(before.Groups) == 0 {
		t.Fatal("no rule groups in the chart's rules")
	}
	for gi, g := range before.Groups {
		for ri := range g.Rules {
			if g.Rules[ri].For != "" {
				before.Groups[gi].Rules[ri].For = "5s"
			}
		}
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("rewritten rules (-want +got):\n%s", diff)
	}
	if _, err := RewriteRules([]byte("groups: [\n"), time.Second); err == nil {
		t.Error("malformed rules accepted")
	}
}

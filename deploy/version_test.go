// SPDX-License-Identifier: Apache-2.0

package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestVersionsAgree checks that the release version is written once: the
// file VERSION is what `make build` stamps into `ipvs-guard version`
// (Makefile), what hack/image/build.sh and hack/release.sh tag the image
// with, and the chart's version and appVersion, from which the image tag
// defaults (values.yaml leaves image.tag empty).
func TestVersionsAgree(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(raw))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(version) || string(raw) != version+"\n" {
		t.Fatalf("VERSION is %q: want one semantic version (no leading v) and a newline", raw)
	}

	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, filepath.Join("ipvs-guard", "Chart.yaml"), &chart)
	if chart.Version != version || chart.AppVersion != version {
		t.Errorf("Chart.yaml version %q, appVersion %q; VERSION is %q", chart.Version, chart.AppVersion, version)
	}
	var values struct {
		Image struct {
			Tag string `json:"tag"`
		} `json:"image"`
	}
	readYAML(t, filepath.Join("ipvs-guard", "values.yaml"), &values)
	if values.Image.Tag != "" {
		t.Errorf("values.yaml image.tag is %q: leave it empty so the tag is the chart's appVersion", values.Image.Tag)
	}
	helpers, err := os.ReadFile(filepath.Join("ipvs-guard", "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(helpers), ".Values.image.tag | default .Chart.AppVersion") {
		t.Error(`_helpers.tpl: the image tag no longer defaults to .Chart.AppVersion`)
	}

	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`--version ([^ \n]+)`).FindAllStringSubmatch(string(readme), -1) {
		if m[1] != version {
			t.Errorf("README.md installs --version %s; VERSION is %s", m[1], version)
		}
	}

	for file, want := range map[string]string{
		filepath.Join("..", "Makefile"):                  "VERSION ?= $(shell cat VERSION)",
		filepath.Join("..", "hack", "image", "build.sh"): "VERSION=${VERSION:-$(cat VERSION)}",
		filepath.Join("..", "hack", "release.sh"):        "version=$(cat VERSION)",
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not take the version from VERSION (%q)", file, want)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in      string
		major   int
		minor   int
		wantErr bool
	}{
		{in: "v1.37.1", major: 1, minor: 37},
		{in: "v1.31.4+rke2r1", major: 1, minor: 31},
		{in: "1.30.0-eks-1234", major: 1, minor: 30},
		{in: "v1.35", major: 1, minor: 35},
		{in: "v1", wantErr: true},
		{in: "", wantErr: true},
		{in: "vx.y.z", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			v, err := ParseVersion(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && (v.Major != tc.major || v.Minor != tc.minor) {
				t.Errorf("got %d.%d, want %d.%d", v.Major, v.Minor, tc.major, tc.minor)
			}
		})
	}
}

func TestDeprecationNotice(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{{"v1.34.2", false}, {"v1.35.0", true}, {"v1.37.1", true}, {"v2.0.0", true}} {
		v, err := ParseVersion(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		n := DeprecationNotice(v)
		if (n != "") != tc.want {
			t.Errorf("%s: notice %q, want present=%v", tc.v, n, tc.want)
		}
		if n != "" && (!strings.Contains(n, "nftables") || !strings.Contains(n, tc.v)) {
			t.Errorf("%s: notice must name the version and the nftables path: %q", tc.v, n)
		}
	}
}

func TestParseBuildInfo(t *testing.T) {
	f, err := os.Open("testdata/metrics-build-info.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := ParseBuildInfo(f)
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.37.1" || v.Minor != 37 {
		t.Errorf("got %+v", v)
	}
	if _, err := ParseBuildInfo(strings.NewReader("# nothing\nup 1\n")); !errors.Is(err, ErrNoBuildInfo) {
		t.Errorf("err = %v, want ErrNoBuildInfo", err)
	}
	v, err = ParseBuildInfo(strings.NewReader(`kubernetes_build_info{a="x\"}y",git_version="v1.29.3"} 1` + "\n"))
	if err != nil || v.GitVersion != "v1.29.3" {
		t.Errorf("escaped labels: %+v %v", v, err)
	}
}

func FuzzParseBuildInfo(f *testing.F) {
	b, err := os.ReadFile("testdata/metrics-build-info.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`kubernetes_build_info{git_version="` + "\\" + `"} 1`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseBuildInfo(strings.NewReader(string(b)))
		if err == nil && v.GitVersion == "" {
			t.Fatalf("no error and no version")
		}
	})
}

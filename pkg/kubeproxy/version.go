// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Version is a Kubernetes major.minor version.
type Version struct {
	// Major is the major version (1).
	Major int
	// Minor is the minor version (37).
	Minor int
	// GitVersion is the full version string (v1.37.1).
	GitVersion string
}

// String returns the full version string.
func (v Version) String() string { return v.GitVersion }

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// ParseVersion parses "v1.37.1", "1.31.4+rke2r1" or "v1.30.0-eks-…"
// (k8s.io/apimachinery's generic version parser: the leading numbers).
func ParseVersion(s string) (Version, error) {
	v, err := utilversion.ParseGeneric(s)
	if err != nil {
		return Version{}, fmt.Errorf("parsing version %q: %w", s, err)
	}
	return Version{Major: int(v.Major()), Minor: int(v.Minor()), GitVersion: strings.TrimSpace(s)}, nil
}

// ErrNoBuildInfo means a /metrics body has no kubernetes_build_info sample.
var ErrNoBuildInfo = errors.New("no kubernetes_build_info metric")

// ParseBuildInfo finds the git_version label of kubernetes_build_info in a
// Prometheus text exposition (kube-proxy's /metrics).
func ParseBuildInfo(r io.Reader) (Version, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "kubernetes_build_info{")
		if !ok {
			continue
		}
		if v, ok := labelValue(rest, "git_version"); ok {
			return ParseVersion(v)
		}
	}
	if err := sc.Err(); err != nil {
		return Version{}, fmt.Errorf("reading metrics: %w", err)
	}
	return Version{}, ErrNoBuildInfo
}

// labelValue extracts name="value" from a Prometheus label list that ends
// with "}" (values may contain escaped quotes and braces).
func labelValue(labels, name string) (string, bool) {
	for labels != "" {
		labels = strings.TrimLeft(labels, ", ")
		if strings.HasPrefix(labels, "}") {
			return "", false
		}
		k, rest, ok := strings.Cut(labels, "=\"")
		if !ok {
			return "", false
		}
		var val strings.Builder
		i := 0
		for ; i < len(rest); i++ {
			c := rest[i]
			if c == '\\' && i+1 < len(rest) {
				i++
				val.WriteByte(rest[i])
				continue
			}
			if c == '"' {
				break
			}
			val.WriteByte(c)
		}
		if i >= len(rest) {
			return "", false
		}
		if strings.TrimSpace(k) == name {
			return val.String(), true
		}
		labels = rest[i+1:]
	}
	return "", false
}

// IPVSDeprecatedSince is the first Kubernetes minor release that deprecates
// kube-proxy's IPVS mode.
const IPVSDeprecatedSince = 35

// DeprecationNotice returns the IPVS deprecation notice for kube-proxy v, or
// "" when v predates the deprecation.
func DeprecationNotice(v Version) string {
	if !v.AtLeast(1, IPVSDeprecatedSince) {
		return ""
	}
	return fmt.Sprintf("kube-proxy %s: IPVS mode is deprecated since Kubernetes 1.35 (kube-proxy emits an IPVSDeprecation warning; off by default in 1.40, removed in 1.43). "+
		"Plan the move to --proxy-mode=nftables (kernel 5.13+, nft; MetalLB layer 2 needs no strictARP there); "+
		"until then ipvs-guard keeps checking the IPVS prerequisites.", v)
}

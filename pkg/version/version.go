// SPDX-License-Identifier: Apache-2.0

// Package version holds the build information stamped in with -ldflags -X.
package version

import (
	"fmt"
	"runtime"
)

// Stamped at build time with -ldflags "-X github.com/ipvs-guard/ipvs-guard/pkg/version.Version=…".
var (
	// Version is the release version (a git describe string for dev builds).
	Version = "dev"
	// Commit is the git commit the binary was built from.
	Commit = "unknown"
	// BuildDate is the UTC build time in RFC 3339.
	BuildDate = "unknown"
)

// Info is the build information of the running binary.
type Info struct {
	// Version is the release version.
	Version string `json:"version"`
	// Commit is the source commit.
	Commit string `json:"commit"`
	// BuildDate is the build time.
	BuildDate string `json:"buildDate"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the build information.
func Get() Info {
	return Info{
		Version:   Version,
		Commit:    Commit,
		BuildDate: BuildDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// String renders the build information on one line.
func (i Info) String() string {
	return fmt.Sprintf("ipvs-guard %s (commit %s, built %s, %s, %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}

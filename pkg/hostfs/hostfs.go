// SPDX-License-Identifier: Apache-2.0

// Package hostfs resolves host paths under an optional root prefix, so every
// check can read a captured host tree (diagnose --root) or the host's
// filesystem mounted into a pod (/host) exactly like the real /.
//
// It owns path resolution and the kernel release lookup only; it never writes.
package hostfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Root is a host filesystem root. The zero value is "/".
type Root struct {
	// Dir prefixes every absolute host path; empty means "/".
	Dir string
}

// New returns a Root for dir ("" or "/" mean the real root).
func New(dir string) Root { return Root{Dir: dir} }

// Path returns the host path p (absolute, e.g. "/proc/modules") under the root.
func (r Root) Path(p ...string) string {
	joined := filepath.Join(p...)
	if r.Dir == "" || r.Dir == "/" {
		return filepath.Clean("/" + joined)
	}
	return filepath.Join(r.Dir, joined)
}

// IsHost reports whether the root is the real "/" (so syscalls such as
// finit_module act on the same kernel the files describe).
func (r Root) IsHost() bool { return r.Dir == "" || filepath.Clean(r.Dir) == "/" }

// KernelRelease reads the running kernel's release from <root>/proc/sys/kernel/osrelease.
func (r Root) KernelRelease() (string, error) {
	p := r.Path("/proc/sys/kernel/osrelease")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("reading kernel release: %w", err)
	}
	rel := strings.TrimSpace(string(b))
	if rel == "" || strings.ContainsAny(rel, "/\x00") {
		return "", fmt.Errorf("reading kernel release: %s holds no valid release (%q)", p, rel)
	}
	return rel, nil
}

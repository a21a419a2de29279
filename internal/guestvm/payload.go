// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Payload is one run's staging tree, packed after the base image: /init,
// /guest/main, /guest/env, /usr/local/bin/ipvs-guard and whatever the run
// adds (test binaries, kube-proxy, scripts).
type Payload struct {
	// Dir is the staging directory (the guest's /).
	Dir string
}

// NewPayload creates the staging tree in dir (emptied first) with init as
// /init and main as /guest/main.
func NewPayload(dir, init, main string) (*Payload, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for _, d := range []string{"usr/local/bin", "guest"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	p := &Payload{Dir: dir}
	if err := p.Add(init, "/init", 0o755); err != nil {
		return nil, err
	}
	if err := p.Add(main, "/guest/main", 0o755); err != nil {
		return nil, err
	}
	return p, nil
}

// Add copies the host file src to guestPath with mode.
func (p *Payload) Add(src, guestPath string, mode os.FileMode) error {
	dst := filepath.Join(p.Dir, guestPath)
	if err := copyFile(src, dst); err != nil {
		return fmt.Errorf("payload %s: %w", guestPath, err)
	}
	return os.Chmod(dst, mode)
}

// WriteEnv writes /guest/env, which /init sources before /guest/main: one
// `export NAME='value'` line per "NAME=value" in vars.
func (p *Payload) WriteEnv(vars []string) error {
	var b strings.Builder
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	return os.WriteFile(filepath.Join(p.Dir, "guest", "env"), []byte(b.String()), 0o644)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

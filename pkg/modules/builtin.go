// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// ParseModulesBuiltin parses modules.builtin (one module path per line,
// "kernel/lib/crc32.ko") into the set of built-in module names.
func ParseModulesBuiltin(r io.Reader) (map[string]bool, error) {
	out := make(map[string]bool)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := ModuleNameFromPath(line)
		if name == "" || !validModuleName(name) {
			return nil, fmt.Errorf("line %d: %q is not a module path", n, line)
		}
		out[name] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return out, nil
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"fmt"
	"io"
)

// Softdep is a module's soft dependencies: modules (or aliases) to load
// before (Pre) and after (Post) it. Failing to load one is not an error, as
// with kmod.
type Softdep struct {
	// Pre are loaded before the module.
	Pre []string
	// Post are loaded after the module.
	Post []string
}

// ParseModulesSoftdep parses depmod's modules.softdep
// ("softdep libcrc32c pre: crc32c" per line) into soft dependencies per
// module. Other commands in the file are an error: depmod writes only softdeps.
func ParseModulesSoftdep(r io.Reader) (map[string]Softdep, error) {
	c, err := ParseModprobeConfig(r)
	if err != nil {
		return nil, err
	}
	if len(c.Aliases)+len(c.Options)+len(c.Blacklist)+len(c.Install) > 0 {
		return nil, fmt.Errorf("modules.softdep holds commands other than softdep")
	}
	return c.Softdeps, nil
}

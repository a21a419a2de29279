// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package modules

import "os"

// modprobeIDOf: outside Linux nothing is cached (every read parses).
func modprobeIDOf(os.FileInfo) (modprobeFileID, bool) { return modprobeFileID{}, false }

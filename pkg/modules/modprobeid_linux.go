// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"os"
	"syscall"
	"time"
)

// modprobeIDOf returns what tells the file fi describes changed: device,
// inode, size, modification and change time (the change time moves on any
// write, whatever the modification time was set to).
func modprobeIDOf(fi os.FileInfo) (modprobeFileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return modprobeFileID{}, false
	}
	return modprobeFileID{dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(), mtime: fi.ModTime(),
		ctime: time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))}, true //nolint:unconvert // the field types differ by architecture
}

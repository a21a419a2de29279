// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// limitModprobeTotal bounds the modprobe.d files read together (each is
// also at most limitModprobeConf): a real host's hold a few KiB in all
// (Debian 12 and Ubuntu 24.04: under 20 KiB). The configuration parsed from
// them is held in memory, so the budget is its cost (some 6 MiB of RSS at
// the budget, make bench-memory): past it the read is an error naming the
// directories and the budget, before anything is parsed, never a pod
// beyond its memory limit.
var limitModprobeTotal = hostfs.Limit{Kind: "all modprobe.d files together", Max: 256 << 10}

// ErrModprobeBudget: the modprobe.d files hold more than limitModprobeTotal
// together.
var ErrModprobeBudget = errors.New("modprobe.d files too large together")

// ModprobeCache keeps the configuration read from modprobe.d between
// reads, so a resync parses the files again only when one changed: every
// file is the same while its device, inode, size, modification and change
// times are (stat, inside the root) and the set of files is. Callers must
// not modify the configuration it returns. The zero value is ready; safe
// for concurrent use.
type ModprobeCache struct {
	mu      sync.Mutex
	ids     []modprobeFileID // per file read, in order; nil: nothing cached
	cmdline string
	conf    *ModprobeConfig
}

// modprobeFileID is what tells a file changed without reading it.
type modprobeFileID struct {
	path         string
	dev, ino     uint64
	size         int64
	mtime, ctime time.Time
}

// ReadModprobeDirs reads the modprobe configuration kmod (and so
// systemd-modules-load) applies on the host at root: every file
// ModprobeFiles lists, in file-name order, malformed lines skipped as kmod
// skips them, then modprobe.blacklist= on the kernel command line
// (<root>/proc/cmdline). Each blacklist entry and install command records
// the file it came from, each alias its File. A file that is not regular
// (a named pipe, a device other than /dev/null) or larger than its limit,
// or files larger than limitModprobeTotal together, are an error, before
// anything is parsed.
func ReadModprobeDirs(root hostfs.Root) (*ModprobeConfig, error) {
	return (*ModprobeCache)(nil).Read(root)
}

// Read is ReadModprobeDirs, parsing nothing when no file changed since the
// cache last read them (a nil cache parses every time).
func (mc *ModprobeCache) Read(root hostfs.Root) (*ModprobeConfig, error) {
	files := ModprobeFiles(root)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var paths []string
	var ids []modprobeFileID
	cacheable := true
	var total int64
	for _, n := range names {
		p := files[n]
		fi, err := root.Stat(p)
		if isDevNullLink(root, p) || err == nil && hostfs.IsDevNull(fi) {
			continue // a link to /dev/null masks the name: read as nothing
		}
		if errors.Is(err, os.ErrNotExist) {
			continue // gone since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", root.Path(p), err)
		}
		if fi.Mode().IsRegular() {
			if fi.Size() > limitModprobeConf.Max {
				return nil, fmt.Errorf("reading %s: %d bytes is more than the %s: %w", root.Path(p), fi.Size(), limitModprobeConf, hostfs.ErrTooLarge)
			}
			if total += fi.Size(); total > limitModprobeTotal.Max {
				return nil, budgetError(root, p)
			}
		}
		id, ok := modprobeIDOf(fi)
		id.path = p
		cacheable = cacheable && ok
		paths, ids = append(paths, p), append(ids, id)
	}
	cmdline := ""
	if b, err := root.ReadFile(KernelCmdline, limitSmallKernel); err == nil {
		cmdline = string(b)
	}
	if mc != nil {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		if cacheable && mc.conf != nil && mc.cmdline == cmdline && slices.Equal(mc.ids, ids) {
			return mc.conf, nil
		}
		mc.ids, mc.conf = nil, nil
	}
	conf := newModprobeConfig()
	var read int64
	for _, p := range paths {
		n, err := parseModprobeFile(root, p, conf, limitModprobeTotal.Max-read)
		if errors.Is(err, os.ErrNotExist) {
			continue // gone since it was listed
		}
		if err != nil {
			return nil, err
		}
		read += n
	}
	conf.finish()
	for _, m := range cmdlineBlacklist(cmdline) {
		if !conf.Blacklist[m] {
			conf.Blacklist[m] = true
			conf.BlacklistFile[m] = KernelCmdline + " (modprobe.blacklist=)"
		}
	}
	if mc != nil && cacheable {
		mc.ids, mc.cmdline, mc.conf = ids, cmdline, conf
	}
	return conf, nil
}

func budgetError(root hostfs.Root, p string) error {
	return fmt.Errorf("reading %s: the modprobe.d files up to it (%s) hold more than the %s (a real host's hold a few KiB): %w",
		root.Path(p), strings.Join(ModprobeDirs, ", "), limitModprobeTotal, ErrModprobeBudget)
}

// parseModprobeFile parses the modprobe.d file at host path p into conf,
// reading at most its limit and budget bytes; it returns the bytes read.
func parseModprobeFile(root hostfs.Root, p string, conf *ModprobeConfig, budget int64) (int64, error) {
	f, err := root.Open(p)
	if err != nil {
		if errors.Is(err, hostfs.ErrNotRegular) || errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
		return 0, fmt.Errorf("reading %s: %w", root.Path(p), err)
	}
	defer f.Close()
	lim := min(limitModprobeConf.Max, budget)
	lr := &io.LimitedReader{R: f, N: lim + 1}
	if err := conf.parseFrom(lr, true, p); err != nil {
		return 0, fmt.Errorf("parsing %s: %w", root.Path(p), err)
	}
	if lr.N <= 0 {
		if lim < limitModprobeConf.Max {
			return 0, budgetError(root, p)
		}
		return 0, fmt.Errorf("reading %s: it is larger than the %s: %w", root.Path(p), limitModprobeConf, hostfs.ErrTooLarge)
	}
	return lim + 1 - lr.N, nil
}

// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// limitModprobeTotal bounds the modprobe.d files read together, each at
// most limitModprobeConf: a real host's hold a few KiB in all (Debian 12 and
// Ubuntu 24.04: under 20 KiB). The configuration parsed from them is held in
// memory (and re-read every resync), so the budget is its cost: past it the
// read is an error naming the directories and the budget, never a pod
// beyond its memory limit.
var limitModprobeTotal = hostfs.Limit{Kind: "all modprobe.d files together", Max: 2 << 20}

// ErrModprobeBudget: the modprobe.d files hold more than limitModprobeTotal
// together.
var ErrModprobeBudget = errors.New("modprobe.d files too large together")

// ModprobeCache keeps the configuration parsed from each modprobe.d file
// between reads, so a resync re-parses only the files that changed: a file
// is the same while its device, inode, size, modification and change times
// are (read from the opened file). The zero value is ready; safe for
// concurrent use.
type ModprobeCache struct {
	mu    sync.Mutex
	files map[string]cachedModprobe // root path + host path → parsed file
}

type cachedModprobe struct {
	id   modprobeFileID
	conf *ModprobeConfig
}

// modprobeFileID is what tells a file changed without reading it.
type modprobeFileID struct {
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
// or files larger than limitModprobeTotal together, are an error.
func ReadModprobeDirs(root hostfs.Root) (*ModprobeConfig, error) {
	return (*ModprobeCache)(nil).Read(root)
}

// Read is ReadModprobeDirs, parsing only the files that changed since the
// cache last read them (a nil cache parses every file).
func (mc *ModprobeCache) Read(root hostfs.Root) (*ModprobeConfig, error) {
	files := ModprobeFiles(root)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var old map[string]cachedModprobe
	if mc != nil {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		old = mc.files
	}
	next := map[string]cachedModprobe{}
	conf := newModprobeConfig()
	var total int64
	optParts := map[string][]string{}
	for _, n := range names {
		p := files[n]
		if fi, err := root.Stat(p); isDevNullLink(root, p) || err == nil && hostfs.IsDevNull(fi) {
			continue // a link to /dev/null masks the name: read as nothing
		}
		c, size, id, err := readModprobeFile(root, p, old[root.Path(p)], limitModprobeTotal.Max-total)
		if errors.Is(err, os.ErrNotExist) {
			continue // gone since it was listed
		}
		if errors.Is(err, ErrModprobeBudget) {
			return nil, fmt.Errorf("reading %s: the modprobe.d files up to it (%s) hold more than the %s (a real host's hold a few KiB): %w",
				root.Path(p), strings.Join(ModprobeDirs, ", "), limitModprobeTotal, err)
		}
		if err != nil {
			return nil, err
		}
		total += size
		if id != (modprobeFileID{}) {
			next[root.Path(p)] = cachedModprobe{id: id, conf: c}
		}
		for k, v := range c.Options {
			optParts[k] = append(optParts[k], v)
		}
		conf.merge(c)
	}
	for k, parts := range optParts {
		conf.Options[k] = strings.Join(parts, " ")
	}
	if mc != nil {
		mc.files = next
	}
	if b, err := root.ReadFile(KernelCmdline, limitSmallKernel); err == nil {
		for _, m := range cmdlineBlacklist(string(b)) {
			if !conf.Blacklist[m] {
				conf.Blacklist[m] = true
				conf.BlacklistFile[m] = KernelCmdline + " (modprobe.blacklist=)"
			}
		}
	}
	return conf, nil
}

// readModprobeFile parses the modprobe.d file at host path p, or returns
// the cached parse when the opened file is the one cached; a file larger
// than budget is ErrModprobeBudget, unparsed. The parsed configuration is
// never modified after it is returned (merge copies it).
func readModprobeFile(root hostfs.Root, p string, cached cachedModprobe, budget int64) (*ModprobeConfig, int64, modprobeFileID, error) {
	f, err := root.Open(p)
	if err != nil {
		if errors.Is(err, hostfs.ErrNotRegular) || errors.Is(err, os.ErrNotExist) {
			return nil, 0, modprobeFileID{}, err
		}
		return nil, 0, modprobeFileID{}, fmt.Errorf("reading %s: %w", root.Path(p), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, modprobeFileID{}, fmt.Errorf("reading %s: %w", root.Path(p), err)
	}
	if fi.Size() > limitModprobeConf.Max {
		return nil, 0, modprobeFileID{}, fmt.Errorf("reading %s: %d bytes is more than the %s: %w", root.Path(p), fi.Size(), limitModprobeConf, hostfs.ErrTooLarge)
	}
	if fi.Size() > budget {
		return nil, 0, modprobeFileID{}, ErrModprobeBudget
	}
	id, ok := modprobeIDOf(fi)
	if ok && cached.conf != nil && cached.id == id {
		return cached.conf, fi.Size(), id, nil
	}
	lr := &io.LimitedReader{R: f, N: limitModprobeConf.Max + 1}
	c, err := parseModprobeConfig(lr, true)
	if err != nil {
		return nil, 0, modprobeFileID{}, fmt.Errorf("parsing %s: %w", root.Path(p), err)
	}
	if lr.N <= 0 || limitModprobeConf.Max+1-lr.N > budget {
		return nil, 0, modprobeFileID{}, fmt.Errorf("reading %s: it grew past the %s: %w", root.Path(p), limitModprobeConf, hostfs.ErrTooLarge)
	}
	for i := range c.Aliases {
		c.Aliases[i].File = p
	}
	for k := range c.Blacklist {
		c.BlacklistFile[k] = p
	}
	for k := range c.Install {
		c.InstallFile[k] = p
	}
	if !ok {
		id = modprobeFileID{}
	}
	return c, fi.Size(), id, nil
}

// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// DefaultModulesLoadDirs are the directories systemd-modules-load reads
// (docs/design.md §3.1), as host paths.
var DefaultModulesLoadDirs = []string{
	"/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d", "/usr/lib/modules-load.d", "/lib/modules-load.d",
}

// dirWatcher reports changes in a set of directories through inotify. It
// watches those that exist and retries the others on Rescan, so a directory
// created later is picked up at the next resync.
type dirWatcher struct {
	w *fsnotify.Watcher
	// mu guards watched.
	mu      sync.Mutex
	dirs    []string
	watched map[string]bool
}

func newDirWatcher(dirs []string) (*dirWatcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("creating inotify watcher: %w", err)
	}
	d := &dirWatcher{w: w, dirs: dirs, watched: map[string]bool{}}
	return d, nil
}

// Rescan adds a watch on every directory that exists and is not watched yet.
func (d *dirWatcher) Rescan(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dir := range d.dirs {
		if d.watched[dir] {
			continue
		}
		if err := d.w.Add(dir); err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, os.ErrNotExist) {
				klog.FromContext(ctx).V(2).Info("Cannot watch directory", "dir", dir, "err", err)
			}
			continue
		}
		d.watched[dir] = true
	}
}

// Run calls fn for every change until ctx is done, then closes the watcher.
func (d *dirWatcher) Run(ctx context.Context, fn func(fsnotify.Event)) {
	defer d.w.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-d.w.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				d.mu.Lock()
				if d.watched[ev.Name] { // the directory itself went away
					delete(d.watched, ev.Name)
				}
				d.mu.Unlock()
			}
			fn(ev)
		case err, ok := <-d.w.Errors:
			if !ok {
				return
			}
			klog.FromContext(ctx).Error(err, "inotify watcher error")
			fn(fsnotify.Event{})
		}
	}
}

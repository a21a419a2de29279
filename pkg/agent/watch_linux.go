// SPDX-License-Identifier: Apache-2.0

//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ueventGroupKernel is the multicast group the kernel sends uevents to.
const ueventGroupKernel = 1

// WatchModuleUevents calls fn for every kernel module add/remove uevent until
// ctx is done. It returns an error when the uevent socket cannot be opened
// (the caller then relies on the resync ticker).
func WatchModuleUevents(ctx context.Context, fn func(ModuleEvent)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return fmt.Errorf("opening uevent socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: ueventGroupKernel}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("binding uevent socket: %w", err)
	}
	// A large buffer so a burst of uevents (a whole module set loading) is not dropped.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	// A non-blocking fd in an os.File goes through the runtime poller, so
	// Close unblocks a pending Read.
	f := os.NewFile(uintptr(fd), "uevent")
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return nil
			}
			if errors.Is(err, unix.ENOBUFS) {
				// Overrun: some uevents were lost; report a wildcard so the caller rechecks.
				fn(ModuleEvent{Action: "overrun"})
				continue
			}
			return fmt.Errorf("reading uevent socket: %w", err)
		}
		if ev, ok := ParseModuleUevent(buf[:n]); ok {
			fn(ev)
		}
	}
}

// SendModuleUevent multicasts a synthetic module uevent to the kernel uevent
// group, as the kernel would after loading or unloading a module. It needs
// CAP_NET_ADMIN and exists for tests and benchmarks on kernels without
// module support.
func SendModuleUevent(ev ModuleEvent, seq int) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return fmt.Errorf("opening uevent socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, FormatModuleUevent(ev, seq), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: ueventGroupKernel}); err != nil {
		return fmt.Errorf("sending uevent: %w", err)
	}
	return nil
}

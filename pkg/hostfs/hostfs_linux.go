// SPDX-License-Identifier: Apache-2.0

package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// resolveFlags resolve every component inside the root, as a chroot would,
// and refuse /proc/<pid>/fd style magic links (which could leave it).
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openat opens host path p with flags, resolved inside the root.
func (r Root) openat(p string, flags uint64, mode uint32) (int, error) {
	rootfd, err := unix.Open(r.dir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: r.dir(), Err: err}
	}
	defer unix.Close(rootfd)
	return openIn(rootfd, rel(p), flags, mode)
}

// maxAgain bounds the opens retried on EAGAIN; the retries after the first
// few wait againPause each, so a path that keeps answering EAGAIN costs
// about 0.1 s, never a spinning CPU.
const (
	maxAgain   = 100
	againPause = time.Millisecond
)

// ErrBusy is returned when a file keeps refusing a non-blocking open: a
// lease held by another process (until the kernel breaks it, 45 s by
// default), or renames racing the path's resolution without pause.
var ErrBusy = errors.New("the file stays busy: a lease held by another process, or renames racing its path")

func openIn(dirfd int, relPath string, flags uint64, mode uint32) (int, error) {
	for again := 0; ; {
		fd, err := unix.Openat2(dirfd, relPath, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolveFlags})
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN) && again < maxAgain:
			// A concurrent rename raced the resolution (openat2), or a
			// lease is being broken (O_NONBLOCK): try again, soon.
			again++
			if again > 8 {
				time.Sleep(againPause)
			}
			continue
		case errors.Is(err, unix.EAGAIN):
			return -1, fmt.Errorf("%w (%d tries)", ErrBusy, again+1)
		}
		return fd, err
	}
}

// Open opens the regular file at host path p for reading, resolved inside
// the root. A named pipe, socket or device is refused (ErrNotRegular)
// without blocking: the open is non-blocking and the type is checked on the
// opened file.
func (r Root) Open(p string) (*os.File, error) {
	fd, err := r.openat(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.Path(p), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: r.Path(p), Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: r.Path(p), Err: unix.EISDIR}
	default:
		unix.Close(fd)
		return nil, fmt.Errorf("reading %s: it is a %s: %w", r.Path(p), typeName(st.Mode), ErrNotRegular)
	}
	// Reads of a regular file never block; make the descriptor blocking so
	// the runtime does not try to poll it.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: r.Path(p), Err: err}
	}
	return os.NewFile(uintptr(fd), r.Path(p)), nil
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "named pipe"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "special file"
}

// IsDevNull reports whether fi is the character device /dev/null (1:3).
func IsDevNull(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Mode&syscall.S_IFMT == syscall.S_IFCHR && unix.Major(uint64(st.Rdev)) == 1 && unix.Minor(uint64(st.Rdev)) == 3
}

func (r Root) openDir(p string) (*os.File, error) {
	fd, err := r.openat(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.Path(p), Err: err}
	}
	return os.NewFile(uintptr(fd), r.Path(p)), nil
}

// Stat returns the file info of host path p, following links inside the root.
func (r Root) Stat(p string) (os.FileInfo, error) { return r.statFlags(p, 0) }

// Lstat returns the file info of host path p; a final symbolic link is not followed.
func (r Root) Lstat(p string) (os.FileInfo, error) { return r.statFlags(p, unix.O_NOFOLLOW) }

func (r Root) statFlags(p string, extra uint64) (os.FileInfo, error) {
	fd, err := r.openat(p, unix.O_PATH|extra, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: r.Path(p), Err: err}
	}
	f := os.NewFile(uintptr(fd), r.Path(p))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return fi, nil
}

// Readlink returns the target of the symbolic link at host path p.
func (r Root) Readlink(p string) (string, error) {
	fd, err := r.openat(p, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: r.Path(p), Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: r.Path(p), Err: err}
	}
	return string(buf[:n]), nil
}

// mkdirAll opens (creating with 0755 what is missing) the directory at
// host path p, every component resolved inside the root.
func (r Root) mkdirAll(p string) (int, error) {
	rootfd, err := unix.Open(r.dir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: r.dir(), Err: err}
	}
	defer unix.Close(rootfd)
	relPath := rel(p)
	fd, err := openIn(rootfd, relPath, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil || !errors.Is(err, unix.ENOENT) || relPath == "." {
		return fd, err
	}
	parent, err := r.mkdirAll(filepath.Dir("/" + relPath))
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	base := filepath.Base(relPath)
	if err := unix.Mkdirat(parent, base, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, &fs.PathError{Op: "mkdir", Path: r.Path(p), Err: err}
	}
	// Open what is there now through the root again: the name may be a
	// link created meanwhile, which must resolve inside the root too.
	return openIn(rootfd, relPath, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// WriteFileAtomic replaces the file at host path p with data so that
// readers see either the old or the new content: a temporary file in the
// same directory is written, fsynced and renamed over the name, then the
// directory is fsynced. The directory (created 0755 when missing) is
// resolved inside the root, links included; the final name is replaced, not
// followed. An existing file keeps its mode (and, when possible, owner); a
// new one gets perm.
func (r Root) WriteFileAtomic(p string, data []byte, perm os.FileMode) (err error) {
	wrap := func(err error) error { return fmt.Errorf("writing %s: %w", r.Path(p), err) }
	host := filepath.Clean("/" + p)
	base := filepath.Base(host)
	if host == "/" {
		return wrap(unix.EISDIR)
	}
	dirfd, err := r.mkdirAll(filepath.Dir(host))
	if err != nil {
		return wrap(err)
	}
	defer unix.Close(dirfd)
	mode := uint32(perm.Perm())
	owner := [2]int{-1, -1}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return wrap(fmt.Errorf("it is not a regular file: %w", ErrNotRegular))
		}
		mode = st.Mode & 0o777
		owner = [2]int{int(st.Uid), int(st.Gid)}
	} else if !errors.Is(err, unix.ENOENT) {
		return wrap(err)
	}
	tmp := "." + base + ".tmp-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return wrap(err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		if err != nil {
			f.Close()
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return wrap(err)
	}
	if err = unix.Fchmod(fd, mode); err != nil {
		return wrap(err)
	}
	if owner[0] >= 0 {
		_ = unix.Fchown(fd, owner[0], owner[1]) // best effort: keep the owner when we may
	}
	if err = f.Sync(); err != nil {
		return wrap(err)
	}
	if err = f.Close(); err != nil {
		return wrap(err)
	}
	if err = unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
		return wrap(err)
	}
	if serr := unix.Fsync(dirfd); serr != nil {
		return wrap(fmt.Errorf("syncing directory: %w", serr))
	}
	return nil
}

// RemoveIfSame removes the file at host path p when it is still the file
// read (read: the file info ReadFileStat returned): its directory is opened
// inside the root (links included, as every read), the entry there is
// compared with read (same device and inode; a symbolic link is never the
// file read) and unlinked through that directory's descriptor. Nothing
// outside the root is ever removed: a link on the way resolves inside it,
// and the name is removed, never what it points to. A missing file is
// os.ErrNotExist; another file under the name wraps ErrChanged.
func (r Root) RemoveIfSame(p string, read os.FileInfo) error {
	wrap := func(err error) error { return &fs.PathError{Op: "remove", Path: r.Path(p), Err: err} }
	host := filepath.Clean("/" + p)
	if host == "/" {
		return wrap(unix.EISDIR)
	}
	want, ok := read.Sys().(*syscall.Stat_t)
	if !ok || want == nil {
		return wrap(errors.New("no file identity to compare"))
	}
	dirfd, err := r.openat(filepath.Dir(host), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return wrap(err)
	}
	defer unix.Close(dirfd)
	base := filepath.Base(host)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return wrap(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Dev) != uint64(want.Dev) || uint64(st.Ino) != uint64(want.Ino) {
		return wrap(ErrChanged)
	}
	if err := unix.Unlinkat(dirfd, base, 0); err != nil {
		return wrap(err)
	}
	if err := unix.Fsync(dirfd); err != nil {
		return wrap(fmt.Errorf("syncing directory: %w", err))
	}
	return nil
}

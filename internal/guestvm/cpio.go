// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// newc mode bits of the entry types the harness writes.
const (
	cpioDir     = 0o040000
	cpioRegular = 0o100000
	cpioSymlink = 0o120000
)

// cpioWriter writes a "newc" (SVR4, no CRC) cpio archive, the format the
// kernel unpacks as an initramfs. Every entry is owned by root.
type cpioWriter struct {
	w   *bufio.Writer
	n   int64 // bytes written, for padding
	ino uint32
}

func newCpioWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: bufio.NewWriter(w)} }

func (c *cpioWriter) write(p []byte) error {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// entry writes one header, name and body. Regular files carry nlink 1, so
// the kernel never takes two entries for hard links of each other.
func (c *cpioWriter) entry(name string, mode uint32, mtime int64, body io.Reader, size int64) error {
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, uint32(mtime), size, 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(hdr + name + "\x00")); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if body != nil {
		n, err := io.CopyN(c.w, body, size)
		c.n += n
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return c.pad()
}

// close writes the trailer and flushes.
func (c *cpioWriter) close() error {
	if err := c.entry("TRAILER!!!", 0, 0, nil, 0); err != nil {
		return err
	}
	return c.w.Flush()
}

// writeCpio writes the tree under dir to out as a newc cpio archive owned by
// root, entries sorted by path (the same tree gives the same order), names
// relative ("usr/bin/…", as GNU cpio writes them), symbolic links kept as links.
func writeCpio(dir, out string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	c := newCpioWriter(f)
	for _, rel := range names {
		if err := c.add(filepath.Join(dir, rel), rel); err != nil {
			return err
		}
	}
	if err := c.close(); err != nil {
		return err
	}
	return f.Close()
}

// add writes the file at path as name.
func (c *cpioWriter) add(path, name string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	perm := uint32(fi.Mode().Perm())
	if fi.Mode()&os.ModeSetuid != 0 {
		perm |= 0o4000
	}
	if fi.Mode()&os.ModeSetgid != 0 {
		perm |= 0o2000
	}
	if fi.Mode()&os.ModeSticky != 0 {
		perm |= 0o1000
	}
	mtime := fi.ModTime().Unix()
	switch {
	case fi.IsDir():
		return c.entry(name, cpioDir|perm, mtime, nil, 0)
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		return c.entry(name, cpioSymlink|0o777, mtime, strings.NewReader(target), int64(len(target)))
	case fi.Mode().IsRegular():
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		return c.entry(name, cpioRegular|perm, mtime, in, fi.Size())
	}
	return fmt.Errorf("%s: unsupported file type %v", path, fi.Mode().Type())
}

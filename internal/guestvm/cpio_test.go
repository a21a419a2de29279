// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cpioEntry is what readCpio reads back.
type cpioEntry struct {
	Mode uint32
	Body string
}

// readCpio parses concatenated newc archives the way the kernel does: later
// entries replace earlier ones of the same name.
func readCpio(t *testing.T, data []byte) map[string]cpioEntry {
	t.Helper()
	out := map[string]cpioEntry{}
	align := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; off < len(data); {
		if len(data)-off < 110 || string(data[off:off+6]) != "070701" {
			t.Fatalf("offset %d: no newc header", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(data[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		if uid, gid := field(2), field(3); uid != 0 || gid != 0 {
			t.Errorf("owner %d:%d, want 0:0", uid, gid)
		}
		name := string(data[off+110 : off+110+namesize-1])
		body := align(off + 110 + namesize)
		off = align(body + size)
		if name == "TRAILER!!!" {
			continue
		}
		out[name] = cpioEntry{Mode: uint32(mode), Body: string(data[body : body+size])}
	}
	return out
}

func TestPack(t *testing.T) {
	dir := t.TempDir()
	tree := func(name string, files map[string]string, links map[string]string) string {
		root := filepath.Join(dir, name)
		for p, body := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for p, target := range links {
			if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	baseTree := tree("base", map[string]string{"usr/bin/busybox": "bb", "init": "old", "odd": "12345"},
		map[string]string{"bin": "usr/bin"})
	base := filepath.Join(dir, "base.cpio")
	if err := writeCpio(baseTree, base); err != nil {
		t.Fatal(err)
	}
	payload := tree("payload", map[string]string{"init": "#!/bin/sh\n", "guest/main": "main"}, nil)
	want := map[string]cpioEntry{
		"usr":             {Mode: cpioDir | 0o755},
		"usr/bin":         {Mode: cpioDir | 0o755},
		"usr/bin/busybox": {Mode: cpioRegular | 0o755, Body: "bb"},
		"bin":             {Mode: cpioSymlink | 0o777, Body: "usr/bin"},
		"odd":             {Mode: cpioRegular | 0o755, Body: "12345"},
		"init":            {Mode: cpioRegular | 0o755, Body: "#!/bin/sh\n"},
		"guest":           {Mode: cpioDir | 0o755},
		"guest/main":      {Mode: cpioRegular | 0o755, Body: "main"},
	}
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", compress), func(t *testing.T) {
			out := filepath.Join(dir, fmt.Sprintf("initrd-%v", compress))
			if err := Pack(context.Background(), base, payload, out, compress); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if compress {
				zr, err := gzip.NewReader(bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				if data, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(want, readCpio(t, data)); diff != "" {
				t.Errorf("initrd (-want +got):\n%s", diff)
			}
		})
	}
}

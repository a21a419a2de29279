// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

const connHeader = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n"

// writeConnTable writes n entries to <dir>/proc/net/ip_vs_conn: entry i
// comes in on virtual server 10.96.(i/256%4).(i%256):80/TCP and goes to its
// own real server 10.(i>>16).(i>>8).(i):8080, all distinct.
func writeConnTable(t testing.TB, dir string, n int) string {
	t.Helper()
	p := filepath.Join(dir, "proc/net/ip_vs_conn")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString(connHeader)
	for i := range n {
		vip := uint32(0x0A600000 | (i>>8%4)<<8 | i&0xff)
		dst := uint32(0x0A000000 | i&0xffffff)
		fmt.Fprintf(w, "TCP 0A000001 C350 %08X 0050 %08X 1F90 ESTABLISHED     897\n", vip, dst)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadConnCountsHostile: the connection table is read inside the root,
// never blocks on a named pipe, and counts at most MaxConnKeys distinct
// pairs whatever the number of entries.
func TestReadConnCountsHostile(t *testing.T) {
	t.Run("a named pipe is refused at once", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "proc/net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(dir, "proc/net/ip_vs_conn"), 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := ReadConnCounts(hostfs.New(dir), "/proc/net/ip_vs_conn", nil); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, hostfs.ErrNotRegular) {
				t.Errorf("err = %v, want ErrNotRegular", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("blocked on a named pipe")
		}
	})
	t.Run("a link out of the root resolves inside it", func(t *testing.T) {
		base := t.TempDir()
		outside := writeConnTable(t, filepath.Join(base, "host"), 3)
		root := filepath.Join(base, "root")
		if err := os.MkdirAll(filepath.Join(root, "proc/net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(root, "proc/net/ip_vs_conn")); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadConnCounts(hostfs.New(root), "/proc/net/ip_vs_conn", nil); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v, want ErrNotExist (the host's file is not read)", err)
		}
	})
	t.Run("more distinct pairs than MaxConnKeys", func(t *testing.T) {
		dir := t.TempDir()
		writeConnTable(t, dir, MaxConnKeys+1)
		if _, err := ReadConnCounts(hostfs.New(dir), "/proc/net/ip_vs_conn", nil); !errors.Is(err, ErrTooManyConnKeys) {
			t.Errorf("err = %v, want ErrTooManyConnKeys", err)
		}
	})
	t.Run("only the entries kept are counted", func(t *testing.T) {
		dir := t.TempDir()
		writeConnTable(t, dir, 4*MaxConnKeys)
		calls := 0
		c, err := ReadConnCounts(hostfs.New(dir), "/proc/net/ip_vs_conn", func(k ConnKey) bool {
			calls++
			return k.Real.Addr() == netip.MustParseAddr("10.0.0.7")
		})
		if err != nil {
			t.Fatal(err)
		}
		want := ConnKey{Virtual: Key{Address: netip.MustParseAddr("10.96.0.7"), Protocol: TCP, Port: 80}, Real: netip.MustParseAddrPort("10.0.0.7:8080")}
		if len(c) != 1 || c[want] != 1 || calls != 4*MaxConnKeys {
			t.Errorf("counts %v (%d calls to keep), want %v: 1", c, calls, want)
		}
	})
}

// BenchmarkReadConnCounts2M: two million entries, each to its own real
// server, counted for the 100 real servers kept (the ipvs-dataplane check
// keeps those of gone backends): memory is the counts, not the entries
// (go test -bench ReadConnCounts2M -benchmem ./pkg/ipvs).
func BenchmarkReadConnCounts2M(b *testing.B) {
	dir := b.TempDir()
	writeConnTable(b, dir, 2_000_000)
	gone := map[netip.Addr]bool{}
	for i := range 100 {
		gone[netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})] = true
	}
	root := hostfs.New(dir)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c, err := ReadConnCounts(root, "/proc/net/ip_vs_conn", func(k ConnKey) bool { return gone[k.Real.Addr()] })
		if err != nil || len(c) != 100 {
			b.Fatalf("%d counts, %v", len(c), err)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ipvs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// writeProcIPVS writes an IPVS table in /proc/net/ip_vs's format of at
// most size bytes: virtual servers of 10 real servers each.
func writeProcIPVS(t *testing.T, p string, size int64) int {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	n, _ := fmt.Fprintf(w, "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n")
	written, reals := int64(n), 0
	for vs := 0; ; vs++ {
		block := fmt.Sprintf("TCP  0A%06X:01BB rr\n", vs)
		for r := range 10 {
			block += fmt.Sprintf("  -> 0AF4%02X%02X:192B      Masq    1      0          0\n", vs%256, r)
		}
		if written+int64(len(block)) > size {
			break
		}
		w.WriteString(block)
		written += int64(len(block))
		reals += 10
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return reals
}

// TestReadProcIPVSAtLimit: a table at the file's size limit is parsed as
// it is read, holding its real servers (well under the 128 MiB the chart
// gives the pod) but never the file; a larger one is refused, naming the
// limit, and the Handle then reads through netlink.
func TestReadProcIPVSAtLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 16 MiB file")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "ip_vs")
	reals := writeProcIPVS(t, p, procIPVSLimit.Max)
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	before := m.HeapAlloc
	f, err := hostfs.New("/").OpenLimited(p, procIPVSLimit)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := readProcIPVS(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m)
	held := int64(m.HeapAlloc) - int64(before)
	n := 0
	for _, r := range rs {
		n += len(r)
	}
	runtime.KeepAlive(rs)
	if n != reals {
		t.Fatalf("parsed %d real servers, wrote %d", n, reals)
	}
	const budget = 48 << 20
	t.Logf("%d real servers in %d MiB: %.1f MiB held", n, procIPVSLimit.Max>>20, float64(held)/(1<<20))
	if held > budget {
		t.Errorf("parsing an IPVS table at its %s holds %.1f MiB, over %d MiB", procIPVSLimit, float64(held)/(1<<20), budget>>20)
	}

	big := filepath.Join(dir, "ip_vs-big")
	writeProcIPVS(t, big, procIPVSLimit.Max+4096)
	if err := os.Truncate(big, procIPVSLimit.Max+1); err != nil {
		t.Fatal(err)
	}
	if _, err := hostfs.New("/").OpenLimited(big, procIPVSLimit); !errors.Is(err, hostfs.ErrTooLarge) {
		t.Errorf("a table over the limit: %v, want ErrTooLarge", err)
	}
}

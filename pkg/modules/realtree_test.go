// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// TestRealDebianKernelTree resolves the IPVS set over the complete, untrimmed
// module tree of the real Debian kernel package (real .ko files, full
// modules.dep/alias/softdep) with a fake kernel. The tree is the one the
// unit tier unpacks (realDebianModules).
func TestRealDebianKernelTree(t *testing.T) {
	// The unpacked package is the root, read-only: hostfs resolves every
	// link inside its root, so a link from a temporary root to the tree
	// would not be followed out. It has no /proc: nothing is loaded.
	root := filepath.Join(realDebianModules(t), "../../..")
	k := &realFake{}
	l, err := newLoader(hostfs.New(root), debRel, k)
	must(t, err)
	if n := len(l.ix.Names()); n < 4000 {
		t.Fatalf("full tree not parsed: %d modules", n)
	}
	// The fast alias scan agrees with the full parser on the real 26,000-line file.
	b, err := os.ReadFile(filepath.Join(l.ix.Dir, "modules.alias"))
	must(t, err)
	all, err := ParseModulesAlias(bytes.NewReader(b))
	must(t, err)
	for _, name := range []string{"crc32c", "crypto-crc32c", "net-pf-16-proto-16-family-IPVS", "ip_conntrack", "fs-overlay",
		"pci:v00008086d000010D3sv00008086sd0000A01Fbc02sc00i00", "cpu:type:x86,ven0000fam0006mod003F:feature:,0094,00AB", "nosuch"} {
		if diff := cmp.Diff(resolveAlias(all, name), scanAliases(string(b), name)); diff != "" {
			t.Errorf("%s: scan differs from parse (-parse +scan):\n%s", name, diff)
		}
	}
	inserted, err := l.Load(context.Background(), Desired("lc", l.ix))
	must(t, err)
	want := []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack", "ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "ip_vs_lc"}
	if diff := cmp.Diff(want, inserted); diff != "" {
		t.Errorf("load order (-want +got):\n%s", diff)
	}

	// The real ip_vs.ko, compressed by each format's tool, decompresses to
	// the same bytes.
	ipvs, err := l.ix.Entry("ip_vs")
	must(t, err)
	orig, err := os.ReadFile(filepath.Join(l.ix.Dir, ipvs.Path))
	must(t, err)
	for _, format := range []string{"xz", "zstd", "gzip"} {
		img, err := decompress(bytes.NewReader(compressWith(t, format, orig)), format)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if !bytes.Equal(img, orig) || !isELF(img) {
			t.Errorf("%s: decompressed image differs from ip_vs.ko (%d vs %d bytes)", format, len(img), len(orig))
		}
	}
}

// realFake accepts real module files (finit_module on a real ELF .ko).
type realFake struct{ n int }

func (r *realFake) FinitModule(int, string, int) error { r.n++; return nil }
func (r *realFake) InitModule([]byte, string) error    { r.n++; return nil }

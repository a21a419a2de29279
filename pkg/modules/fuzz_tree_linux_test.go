// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// bytesSource is a rand.Source drawing from the fuzzer's bytes, so the
// fuzzer steers every choice genTree makes; each draw is mixed with a
// counter (a Weyl sequence) so that zeros, or no bytes left, never stall
// rand's rejection sampling.
type bytesSource struct {
	b []byte
	n uint64
}

func (s *bytesSource) Uint64() uint64 {
	var buf [8]byte
	k := copy(buf[:], s.b)
	s.b = s.b[k:]
	s.n += 0x9E3779B97F4A7C15
	return binary.LittleEndian.Uint64(buf[:]) ^ s.n
}

// declaredShipped returns the shipped modules the tree declares for boot,
// as ScanDeclarations reads them.
func declaredShipped(t *testing.T, root hostfs.Root) map[string]bool {
	t.Helper()
	ds, err := ScanDeclarations(root, nil)
	if err != nil {
		t.Fatalf("ScanDeclarations: %v", err)
	}
	shipped := map[string]bool{}
	for _, m := range propertyShipped {
		shipped[m] = true
	}
	out := map[string]bool{}
	for _, d := range ds {
		if shipped[d.Module] && d.File != EtcModules {
			out[d.Module] = true
		}
	}
	return out
}

// FuzzFixTree runs the tree reader and the fix as a whole over trees the
// fuzzer shapes (files, links, masks, directories, line ends, comments):
// nothing fails or panics, and after the fix the tree declares every
// shipped module it declared before plus every IPVS module. Each input
// builds a real directory tree, so hack/fuzz.sh runs fewer of them:
// fuzz budget: 2000x
func FuzzFixTree(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("ip_vs\r\nnbd\x00iscsi_tcp\r# x\n; y\nloop max_loop=64"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		genTree(t, rand.New(&bytesSource{b: b}), dir)
		root := hostfs.New(dir)
		before := declaredShipped(t, root)
		_, err := NewChecker(Config{Root: root, Scheduler: "rr", Remediate: true, Loader: &procLoader{root: dir}}).Run(testCtx(t))
		if err != nil && !errors.Is(err, hostfs.ErrNotRegular) {
			t.Fatalf("--fix: %v", err)
		}
		after := declaredShipped(t, root)
		for m := range before {
			if !after[m] {
				t.Fatalf("%s no longer declared for boot (before %v, after %v)", m, setOf(before), setOf(after))
			}
		}
		for _, m := range Desired("rr", nil) {
			if !after[m] {
				t.Fatalf("%s not declared after --fix (after %v)", m, setOf(after))
			}
		}
	})
}

// SPDX-License-Identifier: Apache-2.0

//go:build guest

package modules

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/internal/guest"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// releaseModuleCompression is how each Debian release's kernel package
// ships its modules, as /sys/module/compression spells it ("" plain .ko).
// A release missing here fails the test: say what its kernel ships.
var releaseModuleCompression = map[string]string{
	"bullseye": "",
	"bookworm": "",
	"trixie":   "xz", // CONFIG_MODULE_COMPRESS_XZ, CONFIG_MODULE_DECOMPRESS
}

// syscallRecorder passes every module syscall to the real kernel and
// records which one the loader chose, with finit_module's flags.
type syscallRecorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *syscallRecorder) FinitModule(fd int, params string, flags int) error {
	r.mu.Lock()
	if flags&moduleInitCompressedFile != 0 {
		r.calls = append(r.calls, "finit_module(MODULE_INIT_COMPRESSED_FILE)")
	} else {
		r.calls = append(r.calls, "finit_module")
	}
	r.mu.Unlock()
	return sysKernel{}.FinitModule(fd, params, flags)
}

func (r *syscallRecorder) InitModule(image []byte, params string) error {
	r.mu.Lock()
	r.calls = append(r.calls, "init_module")
	r.mu.Unlock()
	return sysKernel{}.InitModule(image, params)
}

// TestGuestCompressedModules loads the IPVS set from the booted release's
// module files with the native loader, on both of its paths for compressed
// modules: finit_module with MODULE_INIT_COMPRESSED_FILE (the kernel
// decompresses; Linux ≥ 5.17 with CONFIG_MODULE_DECOMPRESS) and, as on a
// kernel without in-kernel decompression, the image decompressed in memory
// and passed to init_module. On Debian 13 every module comes from a .ko.xz
// file; on older releases the files are plain .ko and the test says so.
func TestGuestCompressedModules(t *testing.T) {
	testenv.RequireGuest(t)
	rel := guest.Release(t)
	want, ok := releaseModuleCompression[rel]
	if !ok {
		t.Fatalf("Debian %s is not in releaseModuleCompression: add how its kernel ships modules", rel)
	}
	running, err := runningRelease()
	if err != nil {
		t.Fatal(err)
	}
	root := hostfs.New("/")
	ix, err := ReadIndex(root, running)
	if err != nil {
		t.Fatal(err)
	}
	closure := []string{"ip_vs", "ip_vs_rr", "nf_conntrack", "nf_defrag_ipv4", "nf_defrag_ipv6", "libcrc32c"}
	for _, m := range closure {
		e, err := ix.Entry(m)
		if err != nil {
			t.Fatalf("%s in Debian %s's modules.dep: %v", m, rel, err)
		}
		if got := compressionOf(e.Path); got != want {
			t.Fatalf("Debian %s ships %s as %s (compression %q), want compression %q", rel, m, e.Path, got, want)
		}
	}
	kernelFormat := ""
	if b, err := os.ReadFile("/sys/module/compression"); err == nil {
		kernelFormat = strings.TrimSpace(string(b))
	}
	if want == "" {
		t.Skipf("Debian %s's kernel %s ships plain .ko modules (/sys/module/compression %q): no compressed path to test", rel, running, kernelFormat)
	}
	if kernelFormat != want {
		t.Fatalf("/sys/module/compression = %q, want %q (Debian %s builds CONFIG_MODULE_DECOMPRESS)", kernelFormat, want, rel)
	}

	for _, tc := range []struct {
		name string
		// inKernel keeps the loader's view of /sys/module/compression;
		// false hides it, as on a kernel that cannot decompress modules.
		inKernel bool
		wantCall string
	}{
		{"kernel decompresses", true, "finit_module(MODULE_INIT_COMPRESSED_FILE)"},
		{"decompressed in memory", false, "init_module"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guest.ResetModules(t)
			t.Cleanup(func() { guest.ResetModules(t) })
			guest.RequireNotLoaded(t, closure...)
			rec := &syscallRecorder{}
			l, err := newLoader(root, running, rec)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.inKernel {
				l.compression = ""
			}
			inserted, err := l.Load(testCtx(t), []string{"ip_vs_rr"})
			if err != nil {
				t.Fatalf("loading ip_vs_rr from .ko.%s files: %v", want, err)
			}
			guest.RequireLoaded(t, closure...)
			for _, m := range closure {
				found := false
				for _, n := range inserted {
					found = found || Normalize(n) == m
				}
				if !found {
					t.Errorf("%s loaded but not by the loader (inserted %v)", m, inserted)
				}
			}
			if len(rec.calls) < len(inserted) {
				t.Errorf("%d syscalls %v for %d inserted modules %v", len(rec.calls), rec.calls, len(inserted), inserted)
			}
			for i, c := range rec.calls {
				if c != tc.wantCall {
					t.Errorf("syscall %d = %s, want %s (all: %v)", i, c, tc.wantCall, rec.calls)
				}
			}
			t.Logf("Debian %s, kernel %s: %d modules from .ko.%s through %s: %v", rel, running, len(inserted), want, tc.wantCall, inserted)
		})
	}
}

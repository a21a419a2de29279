// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// fakeKernel records module insertions. A module is identified by its image:
// every fake module file is "\x7fELF" followed by the module name.
type fakeKernel struct {
	calls    []string          // "finit:<name>:<params>:<flags>" or "init:<name>:<params>"
	fail     map[string]error  // module name → error to return
	compress map[int]struct{}  // flags that make finit fail with EOPNOTSUPP
	images   map[string][]byte // module name → image given to init_module
}

func (k *fakeKernel) FinitModule(fd int, params string, flags int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	if _, ok := k.compress[flags]; ok {
		k.calls = append(k.calls, fmt.Sprintf("finit-compressed-refused:%d", flags))
		return syscall.EOPNOTSUPP
	}
	name := string(bytes.TrimPrefix(b, []byte("\x7fELF")))
	k.calls = append(k.calls, fmt.Sprintf("finit:%s:%s:%d", name, params, flags))
	return k.fail[name]
}

func (k *fakeKernel) InitModule(image []byte, params string) error {
	name := string(bytes.TrimPrefix(image, []byte("\x7fELF")))
	if k.images == nil {
		k.images = map[string][]byte{}
	}
	k.images[name] = image
	k.calls = append(k.calls, fmt.Sprintf("init:%s:%s", name, params))
	return k.fail[name]
}

// moduleTree copies a testdata tree, empties /proc/modules and creates a
// fake module file for every modules.dep entry.
func moduleTree(t *testing.T, tree, rel string, compress func(t *testing.T, format string, data []byte) []byte) string {
	t.Helper()
	dir := copyTree(t, tree)
	must(t, os.WriteFile(filepath.Join(dir, "proc/modules"), nil, 0o644))
	ix, err := ReadIndex(hostfs.New(dir), rel)
	must(t, err)
	for _, name := range ix.Names() {
		e, err := ix.Entry(name)
		must(t, err)
		p := filepath.Join(ix.Dir, e.Path)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		data := []byte("\x7fELF" + name)
		if f := compressionOf(e.Path); f != "" {
			data = compress(t, f, data)
		}
		must(t, os.WriteFile(p, data, 0o644))
	}
	return dir
}

func TestLoaderResolutionOrder(t *testing.T) {
	ipvsClosure := []string{
		// libcrc32c's softdep "pre: crc32c" is an alias: every candidate is tried.
		"finit:crc32c_intel::0", "finit:crc32c_generic::0", "finit:libcrc32c::0",
		"finit:nf_defrag_ipv4::0", "finit:nf_defrag_ipv6::0", "finit:nf_conntrack::0", "finit:ip_vs::0",
	}
	tests := []struct {
		name         string
		load         []string
		fail         map[string]error
		options      string
		wantCalls    []string
		wantInserted []string
		wantErr      error
	}{
		{name: "ipvs set", load: []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"},
			wantCalls:    append(append([]string{}, ipvsClosure...), "finit:ip_vs_rr::0", "finit:ip_vs_wrr::0", "finit:ip_vs_sh::0"),
			wantInserted: []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack", "ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"}},
		{name: "softdep candidate failing is ignored (no SSE4.2)", load: []string{"ip_vs"},
			fail:         map[string]error{"crc32c_intel": syscall.ENODEV},
			wantCalls:    ipvsClosure,
			wantInserted: []string{"crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack", "ip_vs"}},
		{name: "already loaded is success", load: []string{"ip_vs"},
			fail:         map[string]error{"ip_vs": syscall.EEXIST, "nf_conntrack": syscall.EEXIST},
			wantCalls:    ipvsClosure,
			wantInserted: []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6"}},
		{name: "requested by alias", load: []string{"net-pf-16-proto-16-family-IPVS"},
			wantCalls: ipvsClosure, wantInserted: []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack", "ip_vs"}},
		{name: "dash name", load: []string{"crc32c-intel"}, wantCalls: []string{"finit:crc32c_intel::0"}, wantInserted: []string{"crc32c_intel"}},
		{name: "builtin needs nothing", load: []string{"ipv6", "crc32"}},
		{name: "modprobe.d options", load: []string{"ip_vs_sh"}, options: "options ip_vs conn_tab_bits=14\noptions ip_vs_sh\nsoftdep ip_vs_sh post: dummy\n",
			wantCalls: []string{"finit:crc32c_intel::0", "finit:crc32c_generic::0", "finit:libcrc32c::0",
				"finit:nf_defrag_ipv4::0", "finit:nf_defrag_ipv6::0", "finit:nf_conntrack::0", "finit:ip_vs:conn_tab_bits=14:0", "finit:ip_vs_sh::0", "finit:dummy::0"},
			wantInserted: []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack", "ip_vs", "ip_vs_sh", "dummy"}},
		{name: "hard dependency failing fails the module", load: []string{"ip_vs_rr"},
			fail:         map[string]error{"nf_conntrack": syscall.ENOMEM},
			wantCalls:    []string{"finit:crc32c_intel::0", "finit:crc32c_generic::0", "finit:libcrc32c::0", "finit:nf_defrag_ipv4::0", "finit:nf_defrag_ipv6::0", "finit:nf_conntrack::0"},
			wantInserted: []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6"},
			wantErr:      syscall.ENOMEM},
		{name: "unknown module", load: []string{"ip_vs_nosuch"}, wantErr: ErrModuleNotFound},
		{name: "install command is never run", load: []string{"ip_vs_sh"}, options: "install ip_vs_sh /bin/false\n", wantErr: ErrInstallCommand},
		{name: "install wrapper that still loads the module is followed", load: []string{"ip_vs_sh"},
			options:      "install ip_vs_sh /sbin/modprobe --ignore-install ip_vs_sh $CMDLINE_OPTS && /bin/true\n",
			wantCalls:    append(append([]string{}, ipvsClosure...), "finit:ip_vs_sh::0"),
			wantInserted: []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack", "ip_vs", "ip_vs_sh"}},
		{name: "install wrapper for another module is not followed", load: []string{"ip_vs_sh"},
			options: "install ip_vs_sh /sbin/modprobe --ignore-install ip_vs_rr\n", wantErr: ErrInstallCommand},
		{name: "blacklisted alias candidate skipped", load: []string{"ip_vs"}, options: "blacklist crc32c_intel\n",
			wantCalls:    ipvsClosure[1:],
			wantInserted: []string{"crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack", "ip_vs"}},
		{name: "modprobe.d alias wins", load: []string{"crc32c"}, options: "alias crc32c crc32c_generic\n",
			wantCalls: []string{"finit:crc32c_generic::0"}, wantInserted: []string{"crc32c_generic"}},
		{name: "blacklisted module is not loaded by name", load: []string{"ip_vs_sh"}, options: "blacklist ip_vs_sh\n", wantErr: ErrBlacklisted},
		{name: "blacklisted dependency is not loaded", load: []string{"ip_vs_rr"}, options: "blacklist ip-vs\n",
			wantCalls:    ipvsClosure[:len(ipvsClosure)-1],
			wantInserted: []string{"crc32c_intel", "crc32c_generic", "libcrc32c", "nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack"},
			wantErr:      ErrBlacklisted},
		{name: "alias redirecting an IPVS name is refused", load: []string{"ip_vs"}, options: "alias ip_vs veth\n", wantErr: ErrAliasRedirect},
		{name: "wildcard alias redirecting conntrack is refused", load: []string{"nf_conntrack"}, options: "alias nf_conn* dummy\n", wantErr: ErrAliasRedirect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := moduleTree(t, "debian12", debRel, nil)
			if tc.options != "" {
				must(t, os.MkdirAll(filepath.Join(dir, "etc/modprobe.d"), 0o755))
				must(t, os.WriteFile(filepath.Join(dir, "etc/modprobe.d/ipvs.conf"), []byte(tc.options), 0o644))
			}
			k := &fakeKernel{fail: tc.fail}
			l, err := newLoader(hostfs.New(dir), debRel, k)
			must(t, err)
			inserted, err := l.Load(context.Background(), tc.load)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Errorf("err = %v", err)
			}
			if diff := cmp.Diff(tc.wantCalls, k.calls); diff != "" {
				t.Errorf("syscalls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantInserted, inserted); diff != "" {
				t.Errorf("inserted (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoaderErrorsNameModuleAndPath(t *testing.T) {
	dir := moduleTree(t, "debian12", debRel, nil)
	p := filepath.Join(dir, "lib/modules", debRel, "kernel/net/netfilter/ipvs/ip_vs_rr.ko")
	must(t, os.WriteFile(p, []byte("this is not a module\n"), 0o644))
	l, err := newLoader(hostfs.New(dir), debRel, &fakeKernel{})
	must(t, err)
	_, err = l.Load(context.Background(), []string{"ip_vs_rr"})
	if !errors.Is(err, ErrNotELF) {
		t.Fatalf("err = %v, want ErrNotELF", err)
	}
	if want := "loading module ip_vs_rr from " + p + ": not an ELF module"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	_, err = l.Load(context.Background(), []string{"nosuch"})
	if want := "loading nosuch: module not found: not in modules.dep, modules.builtin or modules.alias of kernel " + debRel; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

// compressWith compresses data with the format's command-line tool when the
// machine has it (an independent implementation), else with the Go encoder.
func compressWith(t *testing.T, format string, data []byte) []byte {
	t.Helper()
	tool := map[string][]string{"xz": {"xz", "-c", "--check=crc32"}, "zstd": {"zstd", "-q", "-c"}, "gzip": {"gzip", "-c", "-n"}}[format]
	if path, err := exec.LookPath(tool[0]); err == nil {
		cmd := exec.Command(path, tool[1:]...)
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		must(t, err)
		return out
	} else if testenv.InCI() {
		t.Fatalf("missing prerequisite under CI=true: %s (the unit tier installs it)", tool[0])
	}
	var b bytes.Buffer
	switch format {
	case "xz":
		w, err := xz.NewWriter(&b)
		must(t, err)
		_, _ = w.Write(data)
		must(t, w.Close())
	case "zstd":
		w, err := zstd.NewWriter(&b)
		must(t, err)
		_, _ = w.Write(data)
		must(t, w.Close())
	case "gzip":
		w := gzip.NewWriter(&b)
		_, _ = w.Write(data)
		must(t, w.Close())
	}
	return b.Bytes()
}

func TestLoaderDecompresses(t *testing.T) {
	tests := []struct {
		name, tree, rel, compression string
		wantFirst                    []string
	}{
		{name: "rocky8 xz", tree: "rocky8", rel: rockyRel,
			wantFirst: []string{"init:crc32c_intel:", "init:libcrc32c:", "init:nf_defrag_ipv4:", "init:nf_defrag_ipv6:", "init:nf_conntrack:", "init:ip_vs:"}},
		{name: "ubuntu zstd, kernel decompression refused", tree: "ubuntu2404", rel: ubuRel, compression: "zstd",
			wantFirst: []string{"finit-compressed-refused:4", "init:crc32c_intel:", "finit-compressed-refused:4", "init:crc32c_generic:"}},
		{name: "centos7 xz (no softdep file entries)", tree: "centos7", rel: centosRel,
			wantFirst: []string{"init:libcrc32c:", "init:nf_conntrack:", "init:ip_vs:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := moduleTree(t, tc.tree, tc.rel, compressWith)
			k := &fakeKernel{compress: map[int]struct{}{moduleInitCompressedFile: {}}}
			l, err := newLoader(hostfs.New(dir), tc.rel, k)
			must(t, err)
			if l.compression != tc.compression {
				t.Errorf("compression = %q, want %q", l.compression, tc.compression)
			}
			if _, err := l.Load(context.Background(), []string{"ip_vs"}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantFirst, k.calls[:len(tc.wantFirst)]); diff != "" {
				t.Errorf("syscalls (-want +got):\n%s", diff)
			}
			if got := string(k.images["ip_vs"]); got != "\x7fELFip_vs" {
				t.Errorf("decompressed ip_vs image = %q", got)
			}
		})
	}
	t.Run("gzip and a corrupt file", func(t *testing.T) {
		dir := moduleTree(t, "debian12", debRel, nil)
		base := filepath.Join(dir, "lib/modules", debRel)
		dep := filepath.Join(base, "modules.dep")
		b, _ := os.ReadFile(dep)
		s := strings.ReplaceAll(string(b), "kernel/drivers/net/dummy.ko:", "kernel/drivers/net/dummy.ko.gz:")
		s = strings.ReplaceAll(s, "kernel/drivers/net/veth.ko:", "kernel/drivers/net/veth.ko.xz:")
		must(t, os.WriteFile(dep, []byte(s), 0o644))
		must(t, os.WriteFile(filepath.Join(base, "kernel/drivers/net/dummy.ko.gz"), compressWith(t, "gzip", []byte("\x7fELFdummy")), 0o644))
		must(t, os.WriteFile(filepath.Join(base, "kernel/drivers/net/veth.ko.xz"), []byte("not xz at all"), 0o644))
		k := &fakeKernel{}
		l, err := newLoader(hostfs.New(dir), debRel, k)
		must(t, err)
		inserted, err := l.Load(context.Background(), []string{"dummy", "veth"})
		if diff := cmp.Diff([]string{"dummy"}, inserted); diff != "" {
			t.Errorf("inserted (-want +got):\n%s", diff)
		}
		if err == nil || !strings.Contains(err.Error(), "loading module veth from "+filepath.Join(base, "kernel/drivers/net/veth.ko.xz")+": decompressing xz:") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestNativeLoaderRefusesOtherKernel(t *testing.T) {
	running, err := runningRelease()
	if err != nil || running == debRel {
		t.Skip("cannot compare releases here")
	}
	_, err = NewNativeLoader(hostfs.New(filepath.Join("testdata", "debian12")))
	if !errors.Is(err, ErrKernelMismatch) {
		t.Fatalf("err = %v, want ErrKernelMismatch", err)
	}
	if !strings.Contains(err.Error(), "holds kernel "+debRel+" but the running kernel is "+running) {
		t.Errorf("err = %v", err)
	}
}

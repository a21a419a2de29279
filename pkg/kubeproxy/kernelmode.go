// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// NFTablesTable is the nftables table kube-proxy's nftables mode programs
// (in the ip and ip6 families).
const NFTablesTable = "kube-proxy"

// builtinLimit bounds the modules.builtin read to learn whether nf_tables
// is built in (a few hundred KiB on distribution kernels).
var builtinLimit = hostfs.Limit{Kind: "modules.builtin", Max: 16 << 20}

// nfTablesPresent reports whether nf_tables is in the running kernel, so
// that listing nftables tables cannot make the kernel load it (an
// nfnetlink request for an absent subsystem asks for its module): loaded
// (/sys/module/nf_tables), built in (modules.builtin), or a kernel without
// module support (no /proc/modules: nothing can be loaded).
func nfTablesPresent(root hostfs.Root) (bool, error) {
	if _, err := root.Stat("/sys/module/nf_tables"); err == nil {
		return true, nil
	}
	if _, err := root.Stat("/proc/modules"); errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	rel, err := root.KernelRelease()
	if err != nil {
		return false, err
	}
	b, err := root.ReadFile("/lib/modules/"+rel+"/modules.builtin", builtinLimit)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l == "nf_tables.ko" || strings.HasSuffix(l, "/nf_tables.ko") {
			return true, nil
		}
	}
	return false, nil
}

// ReadKernelState reads the kernel's state of kube-proxy: kube-ipvs0
// (readLink) and a kube-proxy nftables table (over netlink, only when
// nf_tables is already in the kernel: a kernel without it has no table).
// root must be the host's: the kernel read is the running one.
func ReadKernelState(root hostfs.Root, readLink LinkReader) (KernelState, error) {
	var s KernelState
	l, err := readLink(DummyInterface)
	if err != nil {
		return s, err
	}
	s.DummyInterface = l.Exists
	present, err := nfTablesPresent(root)
	if err != nil {
		return s, fmt.Errorf("learning whether nf_tables is loaded: %w", err)
	}
	if present {
		if s.NFTablesTable, err = hasNFTablesTable(NFTablesTable); err != nil {
			return s, err
		}
	}
	return s, nil
}

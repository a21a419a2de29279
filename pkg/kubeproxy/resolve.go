// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// Where a resolved mode came from, in order of precedence (docs/design.md
// §3b): kube-proxy itself, the node's configuration, the kernel's state,
// and last what kube-proxy reported earlier.
const (
	// SourceKubeProxy: kube-proxy's /proxyMode and /configz, read just now.
	SourceKubeProxy = "kube-proxy"
	// SourceNodeConfig: the node's own configuration of kube-proxy (RKE2's
	// config.yaml and rendered static pod).
	SourceNodeConfig = "node configuration"
	// SourceConfigMap: the kube-proxy ConfigMap kubeadm's kube-proxy reads.
	SourceConfigMap = "kube-proxy ConfigMap"
	// SourceKernel: the kernel's state (kube-proxy's nftables tables, the
	// kube-ipvs0 interface).
	SourceKernel = "kernel state"
	// SourceLastReport: what kube-proxy reported to this process earlier.
	SourceLastReport = "kube-proxy's last report"
	// SourceFlag: the operator's word (--assume-proxy-mode), asked last.
	SourceFlag = "--assume-proxy-mode"
)

// Evidence is what one source tells of kube-proxy's configured mode.
type Evidence struct {
	// Mode is the mode ("" when the source does not tell).
	Mode string
	// Detail names what was read (files, tables), for messages.
	Detail string
}

// ModeSource tells kube-proxy's configured mode from somewhere other than
// kube-proxy itself. Read returns a zero Evidence when the source has
// nothing to say (no such file), and an error when it has something it
// cannot read or that contradicts itself; either way the next source is
// asked.
type ModeSource struct {
	// Name is one of the Source* constants.
	Name string
	// Read reads the source.
	Read func(ctx context.Context) (Evidence, error)
}

// Resolution is the outcome of ResolveMode.
type Resolution struct {
	// Mode is the resolved mode; "" when no source told it.
	Mode string
	// Source is the Name of the source that told it.
	Source string
	// Detail is that source's Evidence.Detail.
	Detail string
	// Why says, when Mode is "", why each source did not tell, in order.
	Why []string
}

// Known reports whether a source told the mode.
func (r Resolution) Known() bool { return r.Mode != "" }

// String describes the resolution for a message: "nftables mode (node
// configuration: /etc/rancher/rke2/config.yaml …)", or why it is unknown.
func (r Resolution) String() string {
	if r.Known() {
		if r.Detail == "" {
			return fmt.Sprintf("%s mode (%s)", r.Mode, r.Source)
		}
		return fmt.Sprintf("%s mode (%s: %s)", r.Mode, r.Source, r.Detail)
	}
	if len(r.Why) == 0 {
		return "no source tells it"
	}
	return strings.Join(r.Why, "; ")
}

// ResolveMode asks sources in order and returns the first mode one tells.
// Sources are asked in the order given; the caller orders them by
// precedence (node configuration, then the kernel's state).
func ResolveMode(ctx context.Context, sources ...ModeSource) Resolution {
	var r Resolution
	for _, s := range sources {
		ev, err := s.Read(ctx)
		switch {
		case err != nil:
			r.Why = append(r.Why, fmt.Sprintf("%s: %v", s.Name, err))
		case ev.Mode == "":
			r.Why = append(r.Why, fmt.Sprintf("%s: %s", s.Name, orNothing(ev.Detail)))
		default:
			return Resolution{Mode: ev.Mode, Source: s.Name, Detail: ev.Detail}
		}
	}
	return r
}

func orNothing(s string) string {
	if s == "" {
		return "says nothing"
	}
	return s
}

// ConfigMapMode is the mode source of a kubeadm cluster: the mode of the
// kube-proxy ConfigMap's configuration (empty: iptables). A cluster without
// that ConfigMap (RKE2, RKE1) tells nothing. The answer is reused for
// ConfigMapTTL (clk nil: the real clock), so a kube-proxy that stays silent
// costs one GET per node per ConfigMapTTL, not one per resync.
func ConfigMapMode(cs kube.Interface, clk clock.PassiveClock) ModeSource {
	if clk == nil {
		clk = clock.RealClock{}
	}
	var (
		mu  sync.Mutex
		at  time.Time
		ev  Evidence
		err error
	)
	return ModeSource{Name: SourceConfigMap, Read: func(ctx context.Context) (Evidence, error) {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && clk.Since(at) < ConfigMapTTL {
			return ev, err
		}
		ev, err = Evidence{}, nil
		cfg, gerr := ConfigMapConfig(ctx, cs)
		switch {
		case apierrors.IsNotFound(gerr):
			ev.Detail = "no kube-system/kube-proxy ConfigMap"
		case gerr != nil:
			err = gerr
		default:
			ev = Evidence{Mode: cfg.EffectiveMode(), Detail: "kube-system/kube-proxy"}
		}
		if ctx.Err() == nil {
			at = clk.Now()
		}
		return ev, err
	}}
}

// KernelState is what the kernel shows of kube-proxy's mode.
type KernelState struct {
	// NFTablesTable is true when a "kube-proxy" nftables table exists
	// (family ip or ip6): kube-proxy's nftables mode made it since boot,
	// and its IPVS and iptables modes delete it when they start.
	NFTablesTable bool
	// DummyInterface is true when kube-ipvs0 exists: kube-proxy's IPVS mode
	// made it since boot.
	DummyInterface bool
}

// ModeFromKernel tells the mode from the kernel's state: a kube-proxy
// nftables table and no kube-ipvs0 is nftables mode; kube-ipvs0 and no such
// table is IPVS mode; anything else does not tell.
func ModeFromKernel(s KernelState) Evidence {
	switch {
	case s.NFTablesTable && !s.DummyInterface:
		return Evidence{Mode: ModeNFTables, Detail: "a kube-proxy nftables table and no " + DummyInterface}
	case s.DummyInterface && !s.NFTablesTable:
		return Evidence{Mode: ModeIPVS, Detail: DummyInterface + " and no kube-proxy nftables table"}
	case s.DummyInterface:
		return Evidence{Detail: "both a kube-proxy nftables table and " + DummyInterface + " exist"}
	default:
		return Evidence{Detail: "neither a kube-proxy nftables table nor " + DummyInterface}
	}
}

// KernelMode is the mode source of the kernel's state, read by read (a
// seam; ReadKernelState is the real one).
func KernelMode(read func() (KernelState, error)) ModeSource {
	return ModeSource{Name: SourceKernel, Read: func(context.Context) (Evidence, error) {
		s, err := read()
		if err != nil {
			return Evidence{}, err
		}
		return ModeFromKernel(s), nil
	}}
}

// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package nftready

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// TestNetNSProbeReal builds kube-proxy's nf_tables expressions in a private
// network namespace on the running kernel: every feature is accepted, and
// the host's own ruleset is the same before and after (the probe never
// touches it).
func TestNetNSProbeReal(t *testing.T) {
	testenv.RequireRoot(t)
	before := hostTables(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := NetNSProber{}.Probe(ctx)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	t.Logf("probe took %v", time.Since(start))
	var got []string
	for _, r := range res {
		got = append(got, r.Expression)
		if r.Err != nil {
			t.Errorf("%s refused by kernel %s: %v", r.Expression, kernelRelease(), r.Err)
		}
	}
	if !slices.Equal(got, Expressions) {
		t.Errorf("probed %q, want %q", got, Expressions)
	}
	if after := hostTables(t); !slices.Equal(before, after) {
		t.Errorf("host tables changed: %q -> %q", before, after)
	}
}

// hostTables lists the tables of this process's own network namespace.
func hostTables(t *testing.T) []string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatalf("netlink: %v", err)
	}
	defer c.CloseLasting()
	tabs, err := c.ListTables()
	if err != nil {
		t.Fatalf("listing the host's tables: %v", err)
	}
	var out []string
	for _, tb := range tabs {
		if tb.Name == probeTable {
			t.Errorf("the probe's table %s is in the host's namespace", probeTable)
		}
		out = append(out, tb.Name)
	}
	slices.Sort(out)
	return out
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return string(b)
}

// TestHostLinksReal: the interfaces and addresses of this namespace, from
// one address dump, match what the kernel lists per interface.
func TestHostLinksReal(t *testing.T) {
	testenv.RequireRoot(t)
	links, err := hostLinks()
	if err != nil {
		t.Fatal(err)
	}
	var lo *Link
	for i := range links {
		if links[i].Name == "lo" {
			lo = &links[i]
		}
	}
	if lo == nil || !slices.Contains(lo.Addrs, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("lo with 127.0.0.1 not among %+v", links)
	}
}

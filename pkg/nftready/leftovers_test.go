// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// ownFile is ipvs.conf as ipvs-guard writes it.
var ownFile = string(modules.MergeDeclarations(nil, []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"}, nil).Content)

func writeTree(t *testing.T, files map[string]string) hostfs.Root {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hostfs.New(dir)
}

func mode(m string) check.IPVSUseFunc {
	return func(context.Context) check.IPVSUse {
		switch m {
		case "":
			return check.IPVSUse{Applies: true, Assumed: true, Message: "kube-proxy not reachable: assuming IPVS mode"}
		case "assumed-nftables":
			return check.IPVSUse{Mode: "nftables", Assumed: true, Message: "kube-proxy not reachable: assuming nftables mode, as it last reported"}
		}
		return check.IPVSUse{Applies: m == kubeproxy.ModeIPVS, Mode: m}
	}
}

func link(exists bool, addrs ...string) kubeproxy.LinkReader {
	return func(name string) (kubeproxy.Link, error) {
		l := kubeproxy.Link{Name: name, Exists: exists}
		for _, a := range addrs {
			l.Addrs = append(l.Addrs, netip.MustParseAddr(a))
		}
		return l, nil
	}
}

func TestLeftovers(t *testing.T) {
	vs := ipvs.Table{
		{Virtual: ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.1"), Protocol: ipvs.TCP, Port: 443}},
		{Virtual: ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: ipvs.UDP, Port: 53}},
	}
	strictARP := map[string]string{"proc/sys/net/ipv4/conf/all/arp_ignore": "1\n", "proc/sys/net/ipv4/conf/all/arp_announce": "2\n"}
	ipvsSys := map[string]string{"proc/sys/net/ipv4/vs/conntrack": "1\n", "proc/sys/net/ipv4/vs/expire_nodest_conn": "1\n", "proc/sys/net/ipv4/vs/conn_reuse_mode": "1\n"}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	tests := []struct {
		name       string
		mode       string
		files      map[string]string
		link       kubeproxy.LinkReader
		table      ipvs.Interface
		ipsets     IPSetLister
		removeOwn  bool
		wantStatus check.Status
		wantReason string
		want       []string // kind object
		wantRemove []string // some of the remediation lines
		wantGone   bool     // the owned file was removed
		wantErr    bool
	}{
		{name: "IPVS in use", mode: "ipvs", files: map[string]string{"etc/modules-load.d/ipvs.conf": ownFile}, link: link(true, "10.96.0.1"), table: fakeTable{t: vs},
			wantStatus: check.StatusSkipped, wantReason: ReasonIPVSInUse},
		{name: "mode unknown: IPVS assumed", mode: "", link: link(true), wantStatus: check.StatusSkipped, wantReason: ReasonIPVSInUse},
		{name: "clean nftables node", mode: "nftables", link: link(false), table: fakeTable{err: ipvs.ErrModuleNotLoaded},
			wantStatus: check.StatusOK, wantReason: ReasonNoIPVSLeftovers},
		{name: "everything left behind", mode: "nftables",
			files: merge(strictARP, ipvsSys, map[string]string{"etc/modules-load.d/ipvs.conf": ownFile, "sys/module/ip_set/refcnt": "0"}),
			link:  link(true, "10.96.0.1"), table: fakeTable{t: vs},
			ipsets:     func() ([]string, error) { return []string{"KUBE-CLUSTER-IP", "KUBE-LOOP-BACK", "my-own-set"}, nil },
			wantStatus: check.StatusOK, wantReason: ReasonIPVSLeftovers,
			want: []string{"kube-ipvs0 kube-ipvs0", "virtual-server TCP 10.96.0.1:443", "virtual-server UDP 10.96.0.10:53", "ipset KUBE-CLUSTER-IP", "ipset KUBE-LOOP-BACK",
				"sysctl net.ipv4.conf.all.arp_ignore=1,net.ipv4.conf.all.arp_announce=2", "sysctl net.ipv4.vs.conntrack=1,net.ipv4.vs.expire_nodest_conn=1",
				"modules-load-file /etc/modules-load.d/ipvs.conf"},
			wantRemove: []string{"ip link delete kube-ipvs0", "ipvsadm -D -t 10.96.0.1:443", "ipvsadm -D -u 10.96.0.10:53", "rm /etc/modules-load.d/ipvs.conf"}},
		{name: "strict-ARP sysctls alone are no leftover (a hardening of their own)", mode: "iptables", files: strictARP, link: link(false),
			table: fakeTable{err: ipvs.ErrModuleNotLoaded}, wantStatus: check.StatusOK, wantReason: ReasonNoIPVSLeftovers},
		{name: "strict-ARP sysctls beside kube-ipvs0", mode: "nftables", files: strictARP, link: link(true),
			table: fakeTable{err: ipvs.ErrModuleNotLoaded}, wantStatus: check.StatusOK, wantReason: ReasonIPVSLeftovers,
			want: []string{"kube-ipvs0 kube-ipvs0", "sysctl net.ipv4.conf.all.arp_ignore=1,net.ipv4.conf.all.arp_announce=2"}},
		{name: "ipsets not asked while ip_set is not loaded", mode: "iptables", link: link(false), table: fakeTable{err: ipvs.ErrModuleNotLoaded},
			ipsets:     func() ([]string, error) { t.Error("ipsets listed without ip_set"); return nil, nil },
			wantStatus: check.StatusOK, wantReason: ReasonNoIPVSLeftovers},
		{name: "own file removed when asked", mode: "nftables", files: map[string]string{"etc/modules-load.d/ipvs.conf": ownFile}, link: link(false),
			table: fakeTable{err: ipvs.ErrModuleNotLoaded}, removeOwn: true, wantGone: true,
			wantStatus: check.StatusOK, wantReason: ReasonNoIPVSLeftovers},
		{name: "a file with someone else's line is left alone", mode: "nftables",
			files: map[string]string{"etc/modules-load.d/ipvs.conf": ownFile + "br_netfilter\n"}, link: link(false),
			table: fakeTable{err: ipvs.ErrModuleNotLoaded}, removeOwn: true,
			wantStatus: check.StatusOK, wantReason: ReasonIPVSLeftovers, want: []string{"modules-load-file /etc/modules-load.d/ipvs.conf"}},
		{name: "a file someone else started is left alone", mode: "nftables",
			files: map[string]string{"etc/modules-load.d/ipvs.conf": "ip_vs\nip_vs_rr\n"}, link: link(false),
			table: fakeTable{err: ipvs.ErrModuleNotLoaded}, removeOwn: true,
			wantStatus: check.StatusOK, wantReason: ReasonIPVSLeftovers, want: []string{"modules-load-file /etc/modules-load.d/ipvs.conf"}},
		{name: "own file kept while the mode is only assumed", mode: "assumed-nftables", files: map[string]string{"etc/modules-load.d/ipvs.conf": ownFile}, link: link(false),
			table: fakeTable{err: ipvs.ErrModuleNotLoaded}, removeOwn: true,
			wantStatus: check.StatusOK, wantReason: ReasonIPVSLeftovers, want: []string{"modules-load-file /etc/modules-load.d/ipvs.conf"}},
		{name: "own file kept unless asked", mode: "nftables", files: map[string]string{"etc/modules-load.d/ipvs.conf": ownFile}, link: link(false),
			table:      fakeTable{err: ipvs.ErrModuleNotLoaded},
			wantStatus: check.StatusOK, wantReason: ReasonIPVSLeftovers, want: []string{"modules-load-file /etc/modules-load.d/ipvs.conf"}},
		{name: "nothing readable is an error", mode: "nftables", link: func(string) (kubeproxy.Link, error) { return kubeproxy.Link{}, errors.New("EPERM") },
			table: fakeTable{err: errors.New("EPERM")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, tt.files)
			c := NewLeftoversChecker(LeftoversConfig{Root: root, IPVSUse: mode(tt.mode), ReadLink: tt.link, IPVS: tt.table, IPSets: tt.ipsets, RemoveOwn: tt.removeOwn})
			res, err := c.Run(context.Background())
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error: %+v", res)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Name != check.NameIPVSLeftovers || res.Status != tt.wantStatus || res.Reason != tt.wantReason {
				t.Fatalf("%s %s (%s): %s", res.Name, res.Status, res.Reason, res.Message)
			}
			var got []string
			for _, f := range res.Findings {
				l := f.(Leftover)
				got = append(got, l.Kind+" "+l.Object)
				if st := f.State().Leftover; st == nil || st.Kind != l.Kind {
					t.Errorf("state of %v: %+v", l, st)
				}
				if len(l.Remove) == 0 {
					t.Errorf("%v: no command removes it", l)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("findings\n got %q\nwant %q", got, want)
			}
			fix := check.JoinSteps(res.Remediation, "\n")
			for _, w := range tt.wantRemove {
				if !strings.Contains(fix, w) {
					t.Errorf("remediation lacks %q:\n%s", w, fix)
				}
			}
			_, statErr := root.Stat(modules.DefaultDeclarationFile)
			if gone := errors.Is(statErr, os.ErrNotExist); gone != tt.wantGone && tt.files["etc/modules-load.d/ipvs.conf"] != "" {
				t.Errorf("file removed = %v, want %v", gone, tt.wantGone)
			}
			if tt.wantGone && (len(res.Actions) != 1 || !strings.Contains(res.Actions[0], "removed /etc/modules-load.d/ipvs.conf")) {
				t.Errorf("Actions = %q", res.Actions)
			}
		})
	}
}

// TestLeftoversManyVirtualServers: past maxVirtualServerFindings the rest is
// one finding with ipvsadm --clear.
func TestLeftoversManyVirtualServers(t *testing.T) {
	var tab ipvs.Table
	for i := range 150 {
		tab = append(tab, ipvs.Entry{Virtual: ipvs.VirtualServer{Address: netip.AddrFrom4([4]byte{10, 96, byte(i / 256), byte(i)}), Protocol: ipvs.TCP, Port: 80}})
	}
	c := NewLeftoversChecker(LeftoversConfig{Root: writeTree(t, nil), IPVSUse: mode("nftables"), IPVS: fakeTable{t: tab}})
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != maxVirtualServerFindings+1 {
		t.Fatalf("%d findings", len(res.Findings))
	}
	last := res.Findings[len(res.Findings)-1].(Leftover)
	if last.Object != fmt.Sprintf("%d more", 150-maxVirtualServerFindings) || !strings.Contains(last.Remove[0], "ipvsadm --clear") {
		t.Errorf("last finding %+v", last)
	}
}

// TestLeftoversRemovesOnlyInsideRoot: with /etc or /etc/modules-load.d (or
// ipvs.conf itself) an absolute link, the own file is read and removed
// inside --root; a file with ipvs-guard's content at the link's target on
// the host is never touched.
func TestLeftoversRemovesOnlyInsideRoot(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, root, outside string)
		wantGone string // path under root that must be gone ("" none)
	}{
		{name: "modules-load.d an absolute link", setup: func(t *testing.T, root, outside string) {
			mustSymlink(t, outside, filepath.Join(root, "etc/modules-load.d"))
		}},
		{name: "etc an absolute link", setup: func(t *testing.T, root, outside string) {
			mustSymlink(t, filepath.Dir(outside), filepath.Join(root, "etc"))
		}},
		{name: "ipvs.conf an absolute link", setup: func(t *testing.T, root, outside string) {
			mustSymlink(t, filepath.Join(outside, "ipvs.conf"), filepath.Join(root, "etc/modules-load.d/ipvs.conf"))
		}},
		{name: "modules-load.d an absolute link naming a directory both inside the root and on the host", setup: func(t *testing.T, root, outside string) {
			mustWriteFile(t, filepath.Join(outside, "ipvs.conf"), "iscsi_tcp\n") // the host's file, someone else's
			mustWriteFile(t, filepath.Join(root, outside, "ipvs.conf"), ownFile)
			mustSymlink(t, outside, filepath.Join(root, "etc/modules-load.d"))
		}, wantGone: "OUTSIDE/ipvs.conf"},
		{name: "modules-load.d a link resolved inside the root", setup: func(t *testing.T, root, outside string) {
			mustWriteFile(t, filepath.Join(root, "other/ipvs.conf"), ownFile)
			mustSymlink(t, "/other", filepath.Join(root, "etc/modules-load.d"))
		}, wantGone: "other/ipvs.conf"},
		{name: "ipvs.conf a link inside the root: the link is not the file read", setup: func(t *testing.T, root, outside string) {
			mustWriteFile(t, filepath.Join(root, "other/ipvs.conf"), ownFile)
			mustSymlink(t, "/other/ipvs.conf", filepath.Join(root, "etc/modules-load.d/ipvs.conf"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			root, outside := filepath.Join(base, "root"), filepath.Join(base, "host", "modules-load.d")
			mustWriteFile(t, filepath.Join(outside, "ipvs.conf"), ownFile)
			if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, root, outside)
			c := NewLeftoversChecker(LeftoversConfig{Root: hostfs.New(root), IPVSUse: mode("nftables"), ReadLink: link(false),
				IPVS: fakeTable{err: ipvs.ErrModuleNotLoaded}, RemoveOwn: true})
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			hostContent := ownFile
			if tt.wantGone == "OUTSIDE/ipvs.conf" {
				hostContent, tt.wantGone = "iscsi_tcp\n", filepath.Join(outside, "ipvs.conf")
			}
			if b, err := os.ReadFile(filepath.Join(outside, "ipvs.conf")); err != nil || string(b) != hostContent {
				t.Fatalf("the file outside the root was touched: %q, %v (result %s: %s, actions %q)", b, err, res.Reason, res.Message, res.Actions)
			}
			if tt.wantGone != "" {
				if _, err := os.Lstat(filepath.Join(root, tt.wantGone)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s inside the root not removed (%v): %s %q", tt.wantGone, err, res.Message, res.Actions)
				}
			}
		})
	}
}

func mustWriteFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(p)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

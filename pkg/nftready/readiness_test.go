// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck/ipvschecktest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// fakeKubeProxy answers /configz and /metrics.
type fakeKubeProxy struct {
	cfg    kubeproxy.Config
	cfgErr error
	ver    string
	verErr error
}

func (f fakeKubeProxy) Configz(context.Context) (kubeproxy.Config, error) { return f.cfg, f.cfgErr }

func (f fakeKubeProxy) Version(context.Context) (kubeproxy.Version, error) {
	if f.verErr != nil {
		return kubeproxy.Version{}, f.verErr
	}
	return kubeproxy.ParseVersion(f.ver)
}

type fakeTable struct {
	t   ipvs.Table
	err error
}

func (f fakeTable) Table(context.Context) (ipvs.Table, error) { return f.t, f.err }

// allLoaded reads as every nf_tables module loaded.
func allLoaded() (map[string]bool, error) {
	m := map[string]bool{}
	for _, ms := range ExprModules {
		for _, n := range ms {
			m[n] = true
		}
	}
	return m, nil
}

func okProbe(context.Context) ([]ProbeResult, error) {
	out := make([]ProbeResult, 0, len(Expressions))
	for _, e := range Expressions {
		out = append(out, ProbeResult{Expression: e})
	}
	return out, nil
}

var (
	nodeIP   = netip.MustParseAddr("192.168.1.10")
	secondIP = netip.MustParseAddr("10.0.0.10")
)

// readyConfig is a node ready for nftables with nothing to report: new
// kernel, every module loaded, kube-proxy 1.37 with rr and no IPVS extras,
// the IPVS table exactly kube-proxy's for two Services, no kube-ipvs0
// addresses, no NodeLocal DNSCache, no Calico.
func readyConfig() ReadinessConfig {
	cl := ipvschecktest.NewCluster(2)
	return ReadinessConfig{
		Host: Host{
			KernelRelease:   func() (string, error) { return "6.1.0-56-amd64", nil },
			ModulesDisabled: func() (bool, error) { return false, nil },
			Modprobe:        func() (*modules.ModprobeConfig, error) { return modules.ParseModprobeConfig(strings.NewReader("")) },
			Loaded:          allLoaded,
			Links: func() ([]Link, error) {
				return []Link{{Name: "lo", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, {Name: "eth0", Addrs: []netip.Addr{nodeIP}}}, nil
			},
			Primary:     func() ([]netip.Addr, error) { return []netip.Addr{nodeIP}, nil },
			Connections: func(func(ipvs.ConnKey) bool) (ipvs.ConnCounts, error) { return nil, nil },
			Processes:   func() ([]string, error) { return []string{"systemd", "kubelet"}, nil },
		},
		Prober:    ProberFunc(okProbe),
		KubeProxy: fakeKubeProxy{ver: "v1.37.1", cfg: kubeproxy.Config{Mode: "ipvs"}},
		IPVS:      fakeTable{t: ipvschecktest.NewTable(2)},
		Cluster:   cl,
		NodeName:  "node-a",
	}
}

type wantFinding struct{ kind, severity, object string }

// rke2Kept is the switch-cleanup finding of an RKE2 node with IPVS state:
// nothing is removed at the switch.
var rke2Kept = wantFinding{KindSwitchCleanup, SeverityInfo, "kept"}

func TestReadiness(t *testing.T) {
	foreign := ipvs.Entry{Virtual: ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.99.99"), Protocol: ipvs.TCP, Port: 80, Scheduler: "rr"}}
	nodePortSvc := func(c *ReadinessConfig) {
		cl := c.Cluster.(ipvschecktest.Cluster)
		cl.Svcs = append(slices.Clone(cl.Svcs), &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.1.1",
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}}})
		c.Cluster = cl
	}
	tests := []struct {
		name       string
		mod        func(*ReadinessConfig)
		wantStatus check.Status
		want       []wantFinding
		wantInMsg  string
	}{
		{name: "ready, nothing to say", mod: func(*ReadinessConfig) {}, wantStatus: check.StatusOK},
		{name: "old kernel", mod: func(c *ReadinessConfig) {
			c.Host.KernelRelease = func() (string, error) { return "5.10.0-30-amd64", nil }
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindKernelVersion, SeverityBlocker, "5.10.0-30-amd64"}}},
		{name: "5.13 is enough", mod: func(c *ReadinessConfig) {
			c.Host.KernelRelease = func() (string, error) { return "5.13.0", nil }
		}, wantStatus: check.StatusOK},
		{name: "expression refused by the kernel", mod: func(c *ReadinessConfig) {
			c.Prober = ProberFunc(func(ctx context.Context) ([]ProbeResult, error) {
				res, _ := okProbe(ctx)
				res[4].Err = errors.New("no such file or directory")
				return res, nil
			})
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindNFTExpression, SeverityBlocker, ExprNumgen}}, wantInMsg: "nf_tables expression numgen, which kube-proxy's nftables rules use, does not work"},
		{name: "blacklisted module", mod: func(c *ReadinessConfig) {
			c.Host.Loaded = func() (map[string]bool, error) { m, _ := allLoaded(); delete(m, "nft_numgen"); return m, nil }
			c.MayLoadModules = true
			c.Host.Modprobe = func() (*modules.ModprobeConfig, error) {
				conf, err := modules.ParseModprobeConfig(strings.NewReader("blacklist nft_numgen\n"))
				if err == nil {
					conf.BlacklistFile["nft_numgen"] = "/etc/modprobe.d/harden.conf"
				}
				return conf, err
			}
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindModuleBlocked, SeverityBlocker, "nft_numgen"}}, wantInMsg: "/etc/modprobe.d/harden.conf"},
		// kmod applies a blacklist to the module an alias names, not to
		// the dependencies it inserts with it.
		{name: "blacklisted dependency still loads", mod: func(c *ReadinessConfig) {
			c.Host.Loaded = func() (map[string]bool, error) {
				m, _ := allLoaded()
				delete(m, "nf_conntrack")
				delete(m, "nf_nat")
				return m, nil
			}
			c.MayLoadModules = true
			c.Host.Modprobe = func() (*modules.ModprobeConfig, error) {
				return modules.ParseModprobeConfig(strings.NewReader("blacklist nf_conntrack\nblacklist nf_nat\n"))
			}
		}, wantStatus: check.StatusOK},
		{name: "dependency replaced by an install command", mod: func(c *ReadinessConfig) {
			c.Host.Loaded = func() (map[string]bool, error) { m, _ := allLoaded(); delete(m, "nf_conntrack"); return m, nil }
			c.MayLoadModules = true
			c.Host.Modprobe = func() (*modules.ModprobeConfig, error) {
				return modules.ParseModprobeConfig(strings.NewReader("install nf_conntrack /bin/false\n"))
			}
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindModuleBlocked, SeverityBlocker, "nf_conntrack"}}, wantInMsg: `has "install nf_conntrack /bin/false"`},
		{name: "modules_disabled with a module missing", mod: func(c *ReadinessConfig) {
			c.Host.Loaded = func() (map[string]bool, error) { m, _ := allLoaded(); delete(m, "nft_fib_ipv4"); return m, nil }
			c.Host.ModulesDisabled = func() (bool, error) { return true, nil }
			c.Prober = ProberFunc(func(ctx context.Context) ([]ProbeResult, error) {
				res, _ := okProbe(ctx)
				res[3].Err = errors.New("no such file or directory")
				return res, nil
			})
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindModulesDisabled, SeverityBlocker, "kernel.modules_disabled"}, {KindNFTExpression, SeverityBlocker, ExprFib}}},
		{name: "modules_disabled with everything loaded", mod: func(c *ReadinessConfig) {
			c.Host.ModulesDisabled = func() (bool, error) { return true, nil }
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindModulesDisabled, SeverityInfo, "kernel.modules_disabled"}}},
		{name: "probe held back: it would load modules", mod: func(c *ReadinessConfig) {
			c.Host.Loaded = func() (map[string]bool, error) { return map[string]bool{"nf_tables": true}, nil }
			c.Host.Ships = func() (func(string) bool, error) { return func(n string) bool { return n != "nft_numgen" }, nil }
			c.Prober = ProberFunc(func(context.Context) ([]ProbeResult, error) { t.Error("probe ran"); return nil, nil })
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindNFTExpression, SeverityBlocker, "nft_numgen"}, {KindNFTExpression, SeverityInfo, ""}}},
		{name: "kernel without modules: the probe runs", mod: func(c *ReadinessConfig) {
			c.Host.Loaded = func() (map[string]bool, error) { return nil, nil }
		}, wantStatus: check.StatusOK},
		{name: "kube-proxy 1.30", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{ver: "v1.30.4", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindKubeProxyVersion, SeverityBlocker, "v1.30.4"}}},
		{name: "kube-proxy 1.32 beta", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{ver: "v1.32.1", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityChange, "v1.32.1"}}},
		// RKE2 documents the older releases as unsupported in nftables
		// mode, it does not refuse them: info, not a blocker.
		{name: "RKE2 before the gate", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{ver: "v1.35.6+rke2r1", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.35.6+rke2r1"}, rke2Kept}, wantInMsg: "documents kube-proxy's nftables mode as supported (experimental) only from"},
		{name: "RKE2 at the gate", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{ver: "v1.35.7+rke2r1", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.35.7+rke2r1"}, rke2Kept}},
		{name: "RKE2 distro, version without the rke2 suffix, at the gate", mod: func(c *ReadinessConfig) {
			c.Distro = distro.RKE2
			c.KubeProxy = fakeKubeProxy{ver: "v1.34.10", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.34.10"}, rke2Kept}},
		{name: "RKE2 1.36 before the gate", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{ver: "v1.36.2+rke2r2", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.36.2+rke2r2"}, rke2Kept}},
		{name: "RKE2 1.37 has it from .0", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{ver: "v1.37.0+rke2r1", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.37.0+rke2r1"}, rke2Kept}},
		{name: "RKE2 1.33 never had it", mod: func(c *ReadinessConfig) {
			c.Distro = distro.RKE2
			c.KubeProxy = fakeKubeProxy{ver: "v1.33.9", cfg: kubeproxy.Config{Mode: "ipvs"}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.33.9"}, rke2Kept}},
		{name: "version from the Node when /metrics has none", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{verErr: errors.New("no build info"), cfg: kubeproxy.Config{Mode: "ipvs"}}
			c.FallbackVersion = func(context.Context) (kubeproxy.Version, error) { return kubeproxy.ParseVersion("v1.29.0") }
		}, wantStatus: check.StatusProblem, want: []wantFinding{{KindKubeProxyVersion, SeverityBlocker, "v1.29.0"}}},
		{name: "IPVS settings nftables lacks", mod: func(c *ReadinessConfig) {
			c.KubeProxy = fakeKubeProxy{ver: "v1.37.1", cfg: kubeproxy.Config{Mode: "ipvs", IPVS: kubeproxy.IPVSConfig{
				Scheduler: "lc", StrictARP: true, ExcludeCIDRs: []string{"10.200.0.0/16"},
				TCPTimeout: kubeproxy.Duration(900 * time.Second), UDPTimeout: kubeproxy.Duration(30 * time.Second)}}}
		}, wantStatus: check.StatusOK, want: []wantFinding{
			{KindScheduler, SeverityChange, "lc"}, {KindIPVSTimeouts, SeverityChange, "tcpTimeout=15m0s,udpTimeout=30s"},
			{KindExcludeCIDRs, SeverityChange, "10.200.0.0/16"}, {KindStrictARP, SeverityInfo, "strictARP"}}},
		{name: "foreign virtual server", mod: func(c *ReadinessConfig) {
			c.IPVS = fakeTable{t: append(ipvschecktest.NewTable(2), foreign)}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindForeignVirtualServer, SeverityChange, "TCP 10.96.99.99:80"}}, wantInMsg: "TCP 10.96.99.99:80"},
		// kube-proxy's IPVS cleanup runs `modprobe -va ip_vs` first and
		// removes nothing when that fails (kube-proxy 1.37
		// pkg/proxy/ipvs/cleanup.go): the upstream image (kubeadm) has
		// modprobe, RKE2's has not.
		{name: "foreign virtual server on kubeadm: deleted at the switch", mod: func(c *ReadinessConfig) {
			c.Distro = distro.Kubeadm
			c.IPVS = fakeTable{t: append(ipvschecktest.NewTable(2), foreign)}
			c.Host.Links = func() ([]Link, error) {
				return []Link{{Name: "eth0", Addrs: []netip.Addr{nodeIP}}, {Name: "kube-ipvs0", Addrs: []netip.Addr{ipvschecktest.VIP(0)}}}, nil
			}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindForeignVirtualServer, SeverityChange, "TCP 10.96.99.99:80"}, {KindSwitchCleanup, SeverityInfo, "removed"}, {KindServiceIPNotLocal, SeverityChange, "kube-ipvs0"}},
			wantInMsg: "deletes kube-ipvs0, IPVS mode's iptables chains and its KUBE-* ipsets: this node has 3 virtual server(s) and kube-ipvs0 with 1 address(es)"},
		{name: "foreign virtual server on RKE2: nothing is removed at the switch", mod: func(c *ReadinessConfig) {
			c.Distro = distro.RKE2
			c.IPVS = fakeTable{t: append(ipvschecktest.NewTable(2), foreign)}
			c.Host.Links = func() ([]Link, error) {
				return []Link{{Name: "eth0", Addrs: []netip.Addr{nodeIP}}, {Name: "kube-ipvs0", Addrs: []netip.Addr{ipvschecktest.VIP(0)}}}, nil
			}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindForeignVirtualServer, SeverityInfo, "TCP 10.96.99.99:80"}, rke2Kept, {KindServiceIPNotLocal, SeverityChange, "kube-ipvs0"}, {KindKubeProxyVersion, SeverityInfo, "v1.37.1"}},
			wantInMsg: "RKE2's kube-proxy image has no modprobe, and kube-proxy's IPVS cleanup at the switch runs `modprobe -va ip_vs` first and removes nothing when that fails, so it stays"},
		{name: "kubeadm ConfigMap: sync periods and masqueradeAll set for IPVS mode only", mod: func(c *ReadinessConfig) {
			c.Distro = distro.Kubeadm
			c.IPVS = fakeTable{}
			c.ConfigFile = func(context.Context) (kubeproxy.Config, error) {
				return kubeproxy.ParseConfigFile([]byte("mode: ipvs\nipvs:\n  syncPeriod: 10s\n  minSyncPeriod: 2s\niptables:\n  masqueradeAll: true\nnftables:\n  syncPeriod: 0s\n"))
			}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindModeSettings, SeverityChange, "nftables"}},
			wantInMsg: "ipvs.syncPeriod 10s (nftables.syncPeriod unset: 30s); ipvs.minSyncPeriod 2s (nftables.minSyncPeriod unset: 1s); iptables.masqueradeAll true"},
		{name: "kubeadm ConfigMap: the nftables section set too", mod: func(c *ReadinessConfig) {
			c.Distro = distro.Kubeadm
			c.IPVS = fakeTable{}
			c.ConfigFile = func(context.Context) (kubeproxy.Config, error) {
				return kubeproxy.ParseConfigFile([]byte("mode: ipvs\nipvs:\n  syncPeriod: 10s\niptables:\n  masqueradeAll: true\nnftables:\n  syncPeriod: 20s\n  masqueradeAll: true\n"))
			}
		}, wantStatus: check.StatusOK},
		{name: "kubeadm ConfigMap with kubeadm's defaults (0s)", mod: func(c *ReadinessConfig) {
			c.Distro = distro.Kubeadm
			c.IPVS = fakeTable{}
			c.ConfigFile = func(context.Context) (kubeproxy.Config, error) {
				return kubeproxy.ParseConfigFile([]byte("mode: ipvs\nipvs:\n  syncPeriod: 0s\n  minSyncPeriod: 0s\niptables:\n  masqueradeAll: false\n"))
			}
		}, wantStatus: check.StatusOK},
		{name: "kube-proxy ConfigMap not read", mod: func(c *ReadinessConfig) {
			c.ConfigFile = func(context.Context) (kubeproxy.Config, error) { return kubeproxy.Config{}, errors.New("forbidden") }
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindModeSettings, SeverityInfo, ""}}},
		{name: "RKE2: --ipvs-sync-period is ignored in nftables mode", mod: func(c *ReadinessConfig) {
			c.Distro = distro.RKE2
			c.IPVS = fakeTable{}
			c.KubeProxy = fakeKubeProxy{ver: "v1.37.1+rke2r1", cfg: kubeproxy.Config{Mode: "ipvs", IPVS: kubeproxy.IPVSConfig{
				SyncPeriod: kubeproxy.Duration(10 * time.Minute), MinSyncPeriod: kubeproxy.Duration(5 * time.Second)}}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.37.1+rke2r1"}, {KindModeSettings, SeverityChange, "ipvs-sync-period=10m0s,ipvs-min-sync-period=5s"}},
			wantInMsg: "ignores the ipvs-* sync flags and uses iptables-sync-period / iptables-min-sync-period"},
		{name: "RKE2 with kube-proxy's default sync period", mod: func(c *ReadinessConfig) {
			c.Distro = distro.RKE2
			c.IPVS = fakeTable{}
			c.KubeProxy = fakeKubeProxy{ver: "v1.37.1+rke2r1", cfg: kubeproxy.Config{Mode: "ipvs", IPVS: kubeproxy.IPVSConfig{SyncPeriod: kubeproxy.Duration(30 * time.Second), MinSyncPeriod: kubeproxy.Duration(time.Second)}}}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindKubeProxyVersion, SeverityInfo, "v1.37.1+rke2r1"}}},
		{name: "NodePort virtual servers are kube-proxy's", mod: func(c *ReadinessConfig) {
			nodePortSvc(c)
			c.IPVS = fakeTable{t: append(ipvschecktest.NewTable(2),
				ipvs.Entry{Virtual: ipvs.VirtualServer{Address: nodeIP, Protocol: ipvs.TCP, Port: 30080}},
				ipvs.Entry{Virtual: ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.1.1"), Protocol: ipvs.TCP, Port: 80}})}
		}, wantStatus: check.StatusOK},
		{name: "without a cluster virtual servers are not compared", mod: func(c *ReadinessConfig) {
			c.Cluster = nil
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindForeignVirtualServer, SeverityInfo, ""}}},
		{name: "ip_vs not loaded: no table, nothing lost", mod: func(c *ReadinessConfig) {
			c.IPVS = fakeTable{err: fmt.Errorf("reading: %w", ipvs.ErrModuleNotLoaded)}
		}, wantStatus: check.StatusOK},
		{name: "NodePort reached on a secondary address", mod: func(c *ReadinessConfig) {
			nodePortSvc(c)
			c.Host.Links = func() ([]Link, error) {
				return []Link{{Name: "eth0", Addrs: []netip.Addr{nodeIP}}, {Name: "eth1", Addrs: []netip.Addr{secondIP}}}, nil
			}
			c.IPVS = fakeTable{t: append(ipvschecktest.NewTable(2),
				ipvs.Entry{Virtual: ipvs.VirtualServer{Address: nodeIP, Protocol: ipvs.TCP, Port: 30080}},
				ipvs.Entry{Virtual: ipvs.VirtualServer{Address: secondIP, Protocol: ipvs.TCP, Port: 30080}})}
			c.Host.Connections = func(func(ipvs.ConnKey) bool) (ipvs.ConnCounts, error) {
				return ipvs.ConnCounts{
					{Virtual: ipvs.Key{Address: secondIP, Protocol: ipvs.TCP, Port: 30080}, Real: netip.MustParseAddrPort("10.244.0.5:8080")}: 1,
					{Virtual: ipvs.Key{Address: secondIP, Protocol: ipvs.TCP, Port: 30080}, Real: netip.MustParseAddrPort("10.244.0.6:8080")}: 1,
					{Virtual: ipvs.Key{Address: nodeIP, Protocol: ipvs.TCP, Port: 30080}, Real: netip.MustParseAddrPort("10.244.0.5:8080")}:   1,
				}, nil
			}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindNodePortAddress, SeverityChange, "TCP 10.0.0.10:30080"}}, wantInMsg: "2 connection(s)"},
		{name: "Service IPs on kube-ipvs0", mod: func(c *ReadinessConfig) {
			c.Host.Links = func() ([]Link, error) {
				return []Link{{Name: "eth0", Addrs: []netip.Addr{nodeIP}}, {Name: "kube-ipvs0", Addrs: []netip.Addr{ipvschecktest.VIP(1), ipvschecktest.VIP(0)}}}, nil
			}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindServiceIPNotLocal, SeverityChange, "kube-ipvs0"}}, wantInMsg: "(e.g. 10.96.0.0)"},
		{name: "NodeLocal DNSCache", mod: func(c *ReadinessConfig) {
			c.Host.Links = func() ([]Link, error) {
				return []Link{{Name: "eth0", Addrs: []netip.Addr{nodeIP}}, {Name: "nodelocaldns", Addrs: []netip.Addr{NodeLocalDNSAddress}}}, nil
			}
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindNodeLocalDNS, SeverityChange, "nodelocaldns 169.254.20.10"}}},
		{name: "Calico by interface and process", mod: func(c *ReadinessConfig) {
			c.Host.Links = func() ([]Link, error) {
				return []Link{{Name: "eth0", Addrs: []netip.Addr{nodeIP}}, {Name: "cali12345"}, {Name: "vxlan.calico"}}, nil
			}
			c.Host.Processes = func() ([]string, error) { return []string{"calico-node", "bird"}, nil }
		}, wantStatus: check.StatusOK, want: []wantFinding{{KindCalico, SeverityChange, "interface cali12345, process calico-node"}}},
		{name: "nothing readable is no failure", mod: func(c *ReadinessConfig) {
			boom := errors.New("boom")
			c.Host = Host{KernelRelease: func() (string, error) { return "", boom }, Loaded: func() (map[string]bool, error) { return nil, boom }}
			c.Prober = ProberFunc(func(context.Context) ([]ProbeResult, error) { return nil, boom })
			c.KubeProxy = fakeKubeProxy{cfgErr: boom, verErr: boom}
			c.IPVS = fakeTable{err: boom}
		}, wantStatus: check.StatusOK, want: []wantFinding{
			{KindKernelVersion, SeverityInfo, ""}, {KindNFTExpression, SeverityInfo, ""}, {KindNFTExpression, SeverityInfo, ""},
			{KindKubeProxyVersion, SeverityInfo, ""}, {KindScheduler, SeverityInfo, ""}, {KindForeignVirtualServer, SeverityInfo, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := readyConfig()
			tt.mod(&cfg)
			res, err := NewReadinessChecker(cfg).Run(context.Background())
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Name != check.NameNFTablesReadiness || res.Status != tt.wantStatus {
				t.Fatalf("%s %s (%s): %s", res.Name, res.Status, res.Reason, res.Message)
			}
			wantReason := ReasonReadyForNftables
			if tt.wantStatus == check.StatusProblem {
				wantReason = ReasonNotReadyForNftables
			}
			if res.Reason != wantReason {
				t.Errorf("reason %s, want %s", res.Reason, wantReason)
			}
			var got []wantFinding
			var text []string
			for _, f := range res.Findings {
				rf := f.(Finding)
				if rf.Severity == SeverityOK {
					// What passed (TestReadinessOKLines); no metric.
					if st := f.State(); st.Readiness != nil {
						t.Errorf("ok finding %v publishes %+v", rf, st.Readiness)
					}
					continue
				}
				got = append(got, wantFinding{rf.Kind, rf.Severity, rf.Object})
				text = append(text, rf.Message)
				if st := f.State().Readiness; st == nil || st.Kind != rf.Kind || st.Severity != rf.Severity {
					t.Errorf("state of %v: %+v", rf, st)
				}
			}
			sortW := func(a, b wantFinding) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }
			slices.SortFunc(got, sortW)
			want := slices.Clone(tt.want)
			slices.SortFunc(want, sortW)
			if !slices.Equal(got, want) {
				t.Errorf("findings\n got %v\nwant %v\n%s", got, want, strings.Join(text, "\n"))
			}
			if tt.wantInMsg != "" && !strings.Contains(res.Message+strings.Join(text, "\n"), tt.wantInMsg) {
				t.Errorf("%q not in the report: %s\n%s", tt.wantInMsg, res.Message, strings.Join(text, "\n"))
			}
		})
	}
}

func TestParseKernelAndPatch(t *testing.T) {
	for _, tt := range []struct {
		rel        string
		maj, mnr   int
		ok         bool
		gv         string
		patch, rke int
	}{
		{"6.1.0-56-amd64", 6, 1, true, "v1.35.7+rke2r1", 7, 1},
		{"5.13", 5, 13, true, "v1.34.10+rke2r2", 10, 2},
		{"4.19.0", 4, 19, true, "v1.37.1", 1, -1},
		{"5.10.0-33-cloud-amd64", 5, 10, true, "v1.36.3+rke2r1", 3, 1},
		{"6.1.0-28-amd64", 6, 1, true, "v1.37.1", 1, -1},
		{"garbage", 0, 0, false, "v1", -1, -1},
	} {
		maj, mnr, ok := parseKernel(tt.rel)
		if maj != tt.maj || mnr != tt.mnr || ok != tt.ok {
			t.Errorf("parseKernel(%q) = %d %d %v", tt.rel, maj, mnr, ok)
		}
		p, r := patchOf(tt.gv)
		if p != tt.patch || r != tt.rke {
			t.Errorf("patchOf(%q) = %d %d", tt.gv, p, r)
		}
	}
}

// TestReadinessOKLines: what the report proved is in it as ok findings (the
// kernel's version, each expression the probe built), in the text and in
// JSON, after every other finding.
func TestReadinessOKLines(t *testing.T) {
	res, err := NewReadinessChecker(readyConfig()).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ok []string
	last := ""
	for _, f := range res.Findings {
		rf := f.(Finding)
		if rf.Severity == SeverityOK {
			ok = append(ok, rf.Kind+" "+rf.Object)
		} else if last == SeverityOK {
			t.Errorf("%v after an ok finding", rf)
		}
		last = rf.Severity
	}
	want := []string{KindKernelVersion + " 6.1.0-56-amd64"}
	for _, e := range Expressions {
		want = append(want, KindNFTExpression+" "+e)
	}
	if !slices.Equal(ok, want) {
		t.Errorf("ok findings %q, want %q", ok, want)
	}
	for _, f := range res.Findings {
		if rf := f.(Finding); rf.Severity == SeverityOK && rf.Kind == KindNFTExpression {
			if s := rf.String(); !strings.HasPrefix(s, "ok nft-expression: nf_tables expression ") {
				t.Errorf("text line %q", s)
			}
			break
		}
	}
}

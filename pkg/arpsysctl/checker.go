// SPDX-License-Identifier: Apache-2.0

package arpsysctl

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/distro"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

// Reasons of the arp-sysctls check (stable: they become Node condition reasons).
const (
	ReasonOK                = "StrictARPSysctlsOK"
	ReasonArpIgnoreTooLow   = "ArpIgnoreTooLow"
	ReasonArpAnnounceWrong  = "ArpAnnounceNotStrict"
	ReasonNoLoadBalancerIPs = "NoLoadBalancerIPs"
	ReasonKubeIPVS0Missing  = "KubeIPVS0Missing"
	SysctlFile              = "/etc/sysctl.d/90-ipvs-guard-strict-arp.conf"
	sysctlFileHeaderComment = "# ARP settings kube-proxy's --ipvs-strict-arp sets (MetalLB layer 2 with IPVS)"
)

// LoadBalancerIPs returns the LoadBalancer ingress IPs of the cluster's
// Services (nil when there is no cluster access).
type LoadBalancerIPs func(ctx context.Context) ([]netip.Addr, error)

// Config builds the arp-sysctls checker.
type Config struct {
	// Root is the host filesystem root.
	Root hostfs.Root
	// Interfaces limits the per-interface evaluation (empty: every ARP-capable one).
	Interfaces []string
	// ReadLink reads kube-ipvs0 (kubeproxy.ReadLink).
	ReadLink kubeproxy.LinkReader
	// LoadBalancerIPs lists the Services' LoadBalancer IPs; nil without a
	// kubeconfig, in which case every kube-ipvs0 address is treated as one
	// (LoadBalancer IPs cannot be told from ClusterIPs then, and the kernel
	// answers ARP for all of them alike).
	LoadBalancerIPs LoadBalancerIPs
	// KubeProxy reads kube-proxy's /configz to say whether strictARP is on (optional).
	KubeProxy *kubeproxy.Client
	// Distro words the kube-proxy remediation.
	Distro distro.Distro
	// IPVSUse, when set, is asked on every Run whether the IPVS
	// prerequisites apply (kube-proxy's mode); when they do not, strict ARP
	// is meaningless (no LoadBalancer IP sits on an interface) and Run
	// reports check.ReasonIPVSNotInUse. Nil: they apply.
	IPVSUse check.IPVSUseFunc
}

// Checker is the arp-sysctls check.
type Checker struct{ cfg Config }

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the arp-sysctls checker.
func NewChecker(cfg Config) (*Checker, error) {
	if cfg.ReadLink == nil {
		return nil, fmt.Errorf("arp-sysctls checker: ReadLink is required")
	}
	return &Checker{cfg: cfg}, nil
}

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameARPSysctls }

// Run implements check.Checker.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameARPSysctls)
	if c.cfg.IPVSUse != nil {
		if use := c.cfg.IPVSUse(ctx); !use.Applies {
			return use.NotInUse(c.Name()), nil
		}
	}
	link, err := c.cfg.ReadLink(kubeproxy.DummyInterface)
	if err != nil {
		return check.Result{}, err
	}
	if !link.Exists {
		return check.Skipped(c.Name(), ReasonNoLoadBalancerIPs, "kube-ipvs0 does not exist: no LoadBalancer IPs are bound on this node"), nil
	}
	ips, how, err := c.lbIPsOnLink(ctx, link)
	if err != nil {
		return check.Result{}, err
	}
	ips, v6 := splitIPv6(ips)
	if v6 > 0 {
		// No count: it would change with every IPv6 LoadBalancer Service.
		how += "; IPv6 addresses left out: the kernel never answers neighbour solicitations for an address on kube-ipvs0"
	}
	if len(ips) == 0 {
		return check.Skipped(c.Name(), ReasonNoLoadBalancerIPs, "kube-ipvs0 holds no IPv4 LoadBalancer IPs ("+how+"): nothing for this node to answer ARP for"), nil
	}
	reading, err := Read(c.cfg.Root, c.cfg.Interfaces)
	if err != nil {
		return check.Result{}, err
	}
	all := Evaluate(reading)
	bad := Unsafe(all)
	ipList := joinAddrs(ips)
	logger.V(2).Info("evaluated ARP sysctls", "iface", kubeproxy.DummyInterface, "lbIPs", ipList, "unsafe", len(bad))
	res := check.Result{Name: c.Name()}
	for _, f := range all {
		res.Findings = append(res.Findings, f)
	}
	if len(bad) == 0 {
		res.Status = check.StatusOK
		res.Reason = ReasonOK
		// No count and no list: kube-proxy binds every LoadBalancer IP
		// on every node, so either would change with every Service.
		res.Message = "arp_ignore/arp_announce keep this node from answering ARP for the LoadBalancer IPs on kube-ipvs0 (" + how + ")"
		return res, nil
	}
	res.Status = check.StatusProblem
	res.Reason = ReasonArpAnnounceWrong
	var names []string
	for _, f := range bad {
		names = append(names, fmt.Sprintf("%s=%d (effective %d, want %s)", f.Sysctl, f.Value, f.Effective, f.Want))
		if strings.HasSuffix(f.Sysctl, ArpIgnore) {
			res.Reason = ReasonArpIgnoreTooLow
		}
	}
	strict := ""
	if c.cfg.KubeProxy != nil {
		if cfg, err := c.cfg.KubeProxy.Configz(ctx); err == nil && !cfg.IPVS.StrictARP {
			strict = " kube-proxy runs with strictARP=false."
		}
	}
	res.Message = fmt.Sprintf("this node answers ARP for the LoadBalancer IPs on kube-ipvs0 (every node holds them all), so clients flap between nodes' MACs: %s.%s",
		strings.Join(names, ", "), strict)
	res.Remediation = Remediation(c.cfg.Distro, bad)
	return res, nil
}

func (c *Checker) lbIPsOnLink(ctx context.Context, link kubeproxy.Link) ([]netip.Addr, string, error) {
	if c.cfg.LoadBalancerIPs == nil {
		return slices.Clone(link.Addrs), "no kubeconfig: every kube-ipvs0 address counts", nil
	}
	lb, err := c.cfg.LoadBalancerIPs(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("listing LoadBalancer IPs: %w", err)
	}
	var out []netip.Addr
	for _, a := range link.Addrs {
		if slices.Contains(lb, a) {
			out = append(out, a)
		}
	}
	return out, "LoadBalancer ingress IPs of Services", nil
}

// splitIPv6 keeps the IPv4 addresses and counts the IPv6 ones. arp_ignore and
// arp_announce are IPv4 settings, and an IPv6 address on kube-ipvs0 needs no
// counterpart: Linux answers a neighbour solicitation only for an address on
// the receiving interface (observed in the arpcheck netns and guest tiers,
// with forwarding on and the device up too).
func splitIPv6(ips []netip.Addr) (v4 []netip.Addr, v6 int) {
	for _, a := range ips {
		if a.Unmap().Is4() {
			v4 = append(v4, a)
		} else {
			v6++
		}
	}
	return v4, v6
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// Remediation returns the fix for unsafe sysctls: kube-proxy's strict ARP
// (the real fix, it keeps the values set) worded for the distro, then the
// immediate sysctl commands and the /etc/sysctl.d file that keeps them
// across reboots.
func Remediation(d distro.Distro, bad []Finding) []check.Step {
	settings := map[string]int{}
	for _, f := range bad {
		name := f.Sysctl
		want := 2
		if strings.HasSuffix(f.Sysctl, ArpIgnore) {
			want = 1
		}
		if f.Interface != "all" {
			// Raising conf/all fixes an interface whose own value is lower;
			// one whose own value is unsafe and higher must be set itself.
			if (want == 1 && f.Value <= 1) || (want == 2 && f.Value <= 2) {
				name = "net.ipv4.conf.all." + suffix(f.Sysctl)
			}
		}
		settings[name] = want
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var cmd strings.Builder
	cmd.WriteString("now (until reboot; kube-proxy with strict ARP keeps it set): sysctl -w")
	file := check.Step{"persist: write " + SysctlFile + ":", sysctlFileHeaderComment}
	for _, k := range keys {
		fmt.Fprintf(&cmd, " %s=%d", k, settings[k])
		file = append(file, fmt.Sprintf("%s = %d", k, settings[k]))
	}
	out := []check.Step{{"the real fix is kube-proxy's strict ARP (--ipvs-strict-arp=true / ipvs.strictARP: true), which sets arp_ignore=1 and arp_announce=2 and keeps them:"}}
	out = append(out, d.KubeProxyRemediation(distro.KubeProxySettings{StrictARP: true})...)
	out = append(out, check.Step{cmd.String()}, file)
	return out
}

func suffix(sysctl string) string {
	i := strings.LastIndexByte(sysctl, '.')
	return sysctl[i+1:]
}

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// ReasonLBIPConflict is the arp check's reason (LoadBalancerARPFailing)
// when something besides its Service claims a LoadBalancer IP: a node's
// address, an interface of this node other than kube-ipvs0, or another
// Service that does not share it by MetalLB's allow-shared-ip rules. It
// outranks every ARP verdict: while the IP is claimed twice no announcer
// can fix it.
const ReasonLBIPConflict = "LoadBalancerIPConflict"

// Kinds of LoadBalancer IP conflict (the kind label of ipvs_guard_lb_ip_conflict).
const (
	// ConflictNodeAddress: the IP is a Node's InternalIP or ExternalIP.
	ConflictNodeAddress = "node-address"
	// ConflictInterface: the IP sits on an interface of this node other than kube-ipvs0.
	ConflictInterface = "interface"
	// ConflictService: another Service has the IP and does not share it by MetalLB's rules.
	ConflictService = "service"
)

// MetalLB's IP sharing annotations (controller/service.go, v0.16.2): the
// stable key wins over the deprecated one when both are set.
const (
	AllowSharedIPAnnotation           = "metallb.io/allow-shared-ip"
	DeprecatedAllowSharedIPAnnotation = "metallb.universe.tf/allow-shared-ip"
)

// kubeIPVS0 is kube-proxy's dummy interface, where every LoadBalancer IP
// belongs in IPVS mode.
const kubeIPVS0 = "kube-ipvs0"

// Conflict is one LoadBalancer IP something else claims too: a finding of
// the arp check. Its JSON is {"ip", "conflict", "service", "other", "message"}.
type Conflict struct {
	// IP is the LoadBalancer IP.
	IP string `json:"ip"`
	// Kind is what else claims it (Conflict* constants).
	Kind string `json:"conflict"`
	// Service is the IP's Service (namespace/name).
	Service string `json:"service"`
	// Other names the other claimant: "node/InternalIP", "node/interface"
	// or the other Service (namespace/name).
	Other string `json:"other"`
	// Message says it in a sentence, with the fix.
	Message string `json:"message"`
}

// String implements check.Finding.
func (c Conflict) String() string { return c.Message }

// State implements check.Finding.
func (c Conflict) State() check.State {
	return check.State{LBIPConflict: &check.LBIPConflictState{IP: c.IP, Kind: c.Kind, Owner: c.Service, Other: c.Other}}
}

// sharingKey is MetalLB's SharingKey: the allow-shared-ip annotation's value.
func sharingKey(s *corev1.Service) string {
	if v, ok := s.Annotations[AllowSharedIPAnnotation]; ok {
		return v
	}
	return s.Annotations[DeprecatedAllowSharedIPAnnotation]
}

// backendKey is MetalLB's BackendKey: Services with externalTrafficPolicy
// Local share an IP only with the same selector.
func backendKey(s *corev1.Service) string {
	if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		return labels.Set(s.Spec.Selector).String()
	}
	return ""
}

// sharingProblem says why MetalLB's allocator (internal/allocator, v0.16.2:
// sharingOK and checkSharing) would refuse a and b the same IP; "" when it
// allows it: both carry the same non-empty sharing key, the same backend key,
// and no protocol and port in common.
func sharingProblem(a, b *corev1.Service) string {
	ka, kb := sharingKey(a), sharingKey(b)
	switch {
	case ka == "" && kb == "":
		return "neither carries the " + AllowSharedIPAnnotation + " annotation"
	case ka == "" || kb == "":
		return "only one carries the " + AllowSharedIPAnnotation + " annotation"
	case ka != kb:
		return fmt.Sprintf("their %s keys differ (%q, %q)", AllowSharedIPAnnotation, ka, kb)
	case backendKey(a) != backendKey(b):
		return "externalTrafficPolicy Local Services share an IP only with the same selector"
	}
	for _, pa := range a.Spec.Ports {
		for _, pb := range b.Spec.Ports {
			if pa.Port == pb.Port && protoOrTCP(pa.Protocol) == protoOrTCP(pb.Protocol) {
				return fmt.Sprintf("both use port %d/%s", pa.Port, protoOrTCP(pa.Protocol))
			}
		}
	}
	return ""
}

func protoOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// serviceConflicts returns, for each of ips, the pairs of LoadBalancer
// Services holding it that MetalLB would not let share it. It reads the
// Services cache only.
func serviceConflicts(svcs []*corev1.Service, ips map[netip.Addr]bool) []Conflict {
	holders := map[netip.Addr][]*corev1.Service{}
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		for _, ing := range s.Status.LoadBalancer.Ingress {
			ip, err := netip.ParseAddr(ing.IP)
			if err != nil || !ips[ip.Unmap()] {
				continue
			}
			ip = ip.Unmap()
			if !slices.Contains(holders[ip], s) {
				holders[ip] = append(holders[ip], s)
			}
		}
	}
	var out []Conflict
	for ip, hs := range holders {
		slices.SortFunc(hs, func(a, b *corev1.Service) int {
			return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
		})
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				why := sharingProblem(a, b)
				if why == "" {
					continue
				}
				an, bn := a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name
				out = append(out, Conflict{IP: ip.String(), Kind: ConflictService, Service: an, Other: bn, Message: fmt.Sprintf(
					"%s is the LoadBalancer IP of both Service %s and Service %s, which MetalLB does not let share it (%s): give one another IP, or give both the same %s key and distinct ports",
					ip, an, bn, why, AllowSharedIPAnnotation)})
			}
		}
	}
	return out
}

// nodeAddressConflicts returns the LoadBalancer IPs (ip → Service) that are
// one of node's InternalIP or ExternalIP addresses: in IPVS mode kube-proxy
// binds the IP to kube-ipvs0 on every node, and the node that owns it
// black-holes its own traffic.
func nodeAddressConflicts(node *corev1.Node, lb map[netip.Addr]string) []Conflict {
	var out []Conflict
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if svc, ok := lb[ip.Unmap()]; ok {
			out = append(out, nodeAddressConflict(ip.Unmap(), svc, node.Name, a.Type))
		}
	}
	return out
}

func nodeAddressConflict(ip netip.Addr, svc, node string, typ corev1.NodeAddressType) Conflict {
	return Conflict{IP: ip.String(), Kind: ConflictNodeAddress, Service: svc, Other: node + "/" + string(typ), Message: fmt.Sprintf(
		"%s is the LoadBalancer IP of Service %s and the %s of node %s (kube-proxy binds it to kube-ipvs0 on every node, and that node's own traffic to it is lost; its kernel answers ARP for it whatever MetalLB elects): take it out of MetalLB's IPAddressPool (or the Service's spec) and give the Service another",
		ip, svc, typ, node)}
}

// nodeAddressMemo keeps the addresses of every other Node as last read,
// and whether a conflict stood then.
type nodeAddressMemo struct {
	mu       sync.Mutex
	read     bool
	addrs    map[netip.Addr][]nodeRef
	standing bool
}

// nodeRef names one Node address: the node and the address's type.
type nodeRef struct {
	node string
	typ  corev1.NodeAddressType
}

// allNodeAddressConflicts returns the probed IPs that are an InternalIP
// or ExternalIP of any Node but this one (whose own Node the cache holds),
// whether or not that node runs an agent: so the k probers of an IP report
// it. The probed IPs, new ones included, are compared with the Nodes'
// addresses as last read; every Node is read again (with MetalLB's state,
// at most once per MetalLBStateTTL) only the first time this node probes
// anything, when the arp check found a problem (a node answering for its
// own address shows as a conflict or a wrong responder: so does a node
// that joins with the address of a LoadBalancer IP), or while a conflict
// stands; never while every probed IP stays answered.
func (v *View) allNodeAddressConflicts(ctx context.Context, probed map[netip.Addr]bool, lb map[netip.Addr]string, problem bool) []Conflict {
	m := &v.nodeAddrs
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(probed) == 0 {
		m.standing = false
		return nil
	}
	if !m.read || problem || m.standing {
		if st := v.metallb.get(ctx); st.nodes != nil {
			m.read, m.addrs = true, map[netip.Addr][]nodeRef{}
			for name, n := range st.nodes {
				if name == v.nodeName {
					continue
				}
				for _, a := range n.addresses {
					m.addrs[a.ip] = append(m.addrs[a.ip], nodeRef{node: name, typ: a.typ})
				}
			}
		}
	}
	var out []Conflict
	for ip := range probed {
		svc, ok := lb[ip]
		if !ok {
			continue
		}
		for _, r := range m.addrs[ip] {
			out = append(out, nodeAddressConflict(ip, svc, r.node, r.typ))
		}
	}
	m.standing = len(out) > 0
	return out
}

// interfaceConflicts returns the LoadBalancer IPs that sit on an interface
// of this node other than kube-ipvs0 (put there by hand or by another
// load balancer such as kube-vip): this node answers ARP for them whatever
// MetalLB elects. An IP that is also one of this node's addresses in its
// Node object (skip) is reported as such instead.
func interfaceConflicts(node string, ifs arpcheck.LocalInterfaces, lb map[netip.Addr]string, skip map[string]bool) []Conflict {
	var out []Conflict
	names := make([]string, 0, len(ifs))
	for n := range ifs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == kubeIPVS0 {
			continue
		}
		for _, p := range ifs[name] {
			ip := p.Addr().Unmap()
			svc, ok := lb[ip]
			if !ok || skip[ip.String()] {
				continue
			}
			out = append(out, Conflict{IP: ip.String(), Kind: ConflictInterface, Service: svc, Other: node + "/" + name, Message: fmt.Sprintf(
				"%s is the LoadBalancer IP of Service %s and sits on interface %s of node %s (not kube-ipvs0), so this node answers for it whatever MetalLB elects: remove it (ip address del %s dev %s) and whatever put it there (kube-vip, keepalived, a static configuration)",
				ip, svc, name, node, p, name)})
		}
	}
	return out
}

// ConflictCheck wraps the arp check built by build over this view's ARP
// targets (ARPTargets(k)) so that its result also names every LoadBalancer
// IP something else claims (ReasonLBIPConflict):
//
//   - an IP that is one of this node's addresses in its Node object (the
//     cached own Node: no read) or sits on one of its interfaces other than
//     kube-ipvs0 (interfaces: netlink, local): reported by this node only;
//   - an IP that is an address of another Node, whether or not it runs an
//     agent: reported by the nodes that probe that IP (the k probers), from
//     every Node's addresses as last read on demand (allNodeAddressConflicts);
//   - an IP two Services hold that MetalLB would not let share it: reported
//     by the nodes that probe that IP (the k probers), from the Services
//     cache (no read).
//
// So a conflict costs one Node write per node that reports it, not one per
// node. The result also carries the AnnouncerNotPreferred advisories of the
// probed IPs (preference.go), which change neither its status nor its message.
func (v *View) ConflictCheck(k int, interfaces func() (arpcheck.LocalInterfaces, error), build func(arpcheck.TargetSource) (*arpcheck.Checker, error)) (check.Checker, error) {
	t := &trackedTargets{src: v.ARPTargets(k)}
	inner, err := build(t.get)
	if err != nil {
		return nil, err
	}
	return check.Func{CheckName: inner.Name(), Fn: func(ctx context.Context) (check.Result, error) {
		res, err := inner.Run(ctx)
		if err != nil {
			return res, err
		}
		conflicts := v.conflicts(ctx, t.ips(), interfaces, res.Status == check.StatusProblem)
		for _, p := range v.preferences(ctx, t.list()) {
			res.Findings = append(res.Findings, p)
		}
		return withConflicts(res, conflicts), nil
	}}, nil
}

// trackedTargets remembers the IPs of the latest targets its source gave.
type trackedTargets struct {
	src  arpcheck.TargetSource
	mu   sync.Mutex
	set  map[netip.Addr]bool
	last []arpcheck.Target
}

func (t *trackedTargets) get(ctx context.Context) ([]arpcheck.Target, error) {
	ts, err := t.src(ctx)
	set := make(map[netip.Addr]bool, len(ts))
	for _, x := range ts {
		set[x.IP.Unmap()] = true
	}
	t.mu.Lock()
	t.set, t.last = set, ts
	t.mu.Unlock()
	return ts, err
}

func (t *trackedTargets) list() []arpcheck.Target {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

func (t *trackedTargets) ips() map[netip.Addr]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.set
}

// conflicts lists the conflicts this node reports (see ConflictCheck),
// sorted by IP, kind and claimants.
func (v *View) conflicts(ctx context.Context, probed map[netip.Addr]bool, interfaces func() (arpcheck.LocalInterfaces, error), problem bool) []Conflict {
	svcs, err := v.Services()
	if err != nil {
		return nil
	}
	lb := map[netip.Addr]string{}
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(ing.IP); err == nil {
				if cur, ok := lb[ip.Unmap()]; !ok || s.Namespace+"/"+s.Name < cur {
					lb[ip.Unmap()] = s.Namespace + "/" + s.Name
				}
			}
		}
	}
	out := serviceConflicts(svcs, probed)
	skip := map[string]bool{}
	if node, err := v.Node(); err == nil {
		for _, c := range nodeAddressConflicts(node, lb) {
			out = append(out, c)
			skip[c.IP] = true
		}
	}
	out = append(out, v.allNodeAddressConflicts(ctx, probed, lb, problem)...)
	if interfaces != nil {
		ifs, err := interfaces()
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot list this node's interfaces for LoadBalancer IP conflicts", "err", err)
		} else {
			out = append(out, interfaceConflicts(v.nodeName, ifs, lb, skip)...)
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int {
		ia, _ := netip.ParseAddr(a.IP)
		ib, _ := netip.ParseAddr(b.IP)
		if c := ia.Compare(ib); c != 0 {
			return c
		}
		return strings.Compare(a.Kind+"\x00"+a.Service+"\x00"+a.Other, b.Kind+"\x00"+b.Service+"\x00"+b.Other)
	})
	return out
}

// withConflicts adds conflicts to the arp check's result: they go first in
// the message (a message cut to a condition's length still says them) and
// make the reason ReasonLBIPConflict.
func withConflicts(res check.Result, conflicts []Conflict) check.Result {
	if len(conflicts) == 0 {
		return res
	}
	msgs := make([]string, len(conflicts))
	steps := make([]string, len(conflicts))
	for i, c := range conflicts {
		msgs[i] = c.Message
		steps[i] = c.Message
		res.Findings = append(res.Findings, c)
	}
	msg := fmt.Sprintf("%d LoadBalancer IP conflict(s): %s", len(conflicts), strings.Join(msgs, "; "))
	if res.Status == check.StatusProblem {
		msg += "; " + res.Message
	}
	res.Status, res.Reason, res.Message = check.StatusProblem, ReasonLBIPConflict, msg
	res.Remediation = append(check.Steps(steps...), res.Remediation...)
	return res
}

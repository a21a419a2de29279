// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
)

// Finding kinds (stable: JSON and the condition's reason).
const (
	KindTableMissing     = "table-missing"
	KindObjectMissing    = "object-missing"
	KindServiceIPMissing = "service-ip-missing"
	KindWrongChain       = "wrong-chain"
	KindNodePortMissing  = "nodeport-missing"
	KindRejected         = "rejected-with-endpoints"
	KindStaleEndpoint    = "stale-endpoint"
	KindMissingEndpoint  = "missing-endpoint"
)

// Finding is one difference between kube-proxy's table and the cluster.
type Finding struct {
	Kind     string `json:"kind"`
	Family   string `json:"family"`
	Service  string `json:"service,omitempty"`
	Element  string `json:"element,omitempty"`
	Chain    string `json:"chain,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
}

// Key identifies the finding across runs (the settle grace).
func (f Finding) Key() string {
	return strings.Join([]string{f.Kind, f.Family, f.Service, f.Element, f.Chain, f.Endpoint}, "|")
}

// String renders the finding as one line (also the condition message's part).
func (f Finding) String() string {
	tbl := "table " + f.Family + " " + TableName
	switch f.Kind {
	case KindTableMissing:
		return tbl + " is missing while kube-proxy runs in nftables mode (a firewall reload or `nft flush ruleset`?)"
	case KindObjectMissing:
		return fmt.Sprintf("%s has no %s", tbl, f.Element)
	case KindServiceIPMissing:
		return fmt.Sprintf("%s: %s of %s is not in %s", tbl, f.Element, f.Service, MapServiceIPs)
	case KindWrongChain:
		return fmt.Sprintf("%s: %s of %s points at %s, not at %s's chain", tbl, f.Element, f.Service, f.Chain, f.Service)
	case KindNodePortMissing:
		return fmt.Sprintf("%s: NodePort %s of %s is not in %s", tbl, f.Element, f.Service, MapNodePorts)
	case KindRejected:
		return fmt.Sprintf("%s: %s of %s, which has endpoints, is in %s (rejected)", tbl, f.Element, f.Service, MapNoEndpoint)
	case KindStaleEndpoint:
		return fmt.Sprintf("%s: %s DNATs to %s, no ready endpoint of %s", tbl, f.Chain, f.Endpoint, f.Service)
	case KindMissingEndpoint:
		return fmt.Sprintf("%s: ready endpoint %s of %s is not in %s", tbl, f.Endpoint, f.Service, f.Chain)
	}
	return f.Kind
}

// State implements check.Finding (no metric of its own yet).
func (f Finding) State() check.State { return check.State{} }

// Input is one comparison's input.
type Input struct {
	Tables   []Table
	Services []*corev1.Service
	// Endpoints are the EndpointSlices' summary (nil: endpoints not judged).
	Endpoints ipvsdrift.ServiceEndpoints
	Node      string
}

// Compare returns every difference between kube-proxy's tables and what
// kube-proxy 1.37.1 programs for the Services and endpoints on this node.
func Compare(in Input) []Finding {
	var out []Finding
	for _, t := range in.Tables {
		v4 := t.Family == "ip"
		if !t.Present {
			if v4 || hasFamily(in.Services, false) {
				out = append(out, Finding{Kind: KindTableMissing, Family: t.Family})
			}
			continue
		}
		missing := false
		for _, c := range append(slices.Clone(BaseChains), ChainServices) {
			if !t.Chains[c] {
				out = append(out, Finding{Kind: KindObjectMissing, Family: t.Family, Element: "chain " + c})
				missing = true
			}
		}
		for _, m := range VerdictMaps {
			if !t.Maps[m] {
				out = append(out, Finding{Kind: KindObjectMissing, Family: t.Family, Element: "map " + m})
				missing = true
			}
		}
		if missing {
			continue
		}
		// The Service port each DNAT chain is named after, once per table.
		chains := map[string][]string{}
		for c := range t.DNAT {
			if p := chainPort(c); p != "" {
				chains[p] = append(chains[p], c)
			}
		}
		for _, s := range in.Services {
			out = append(out, compareService(in, t, chains, s, v4)...)
		}
	}
	slices.SortFunc(out, func(a, b Finding) int { return cmp.Compare(a.Key(), b.Key()) })
	return out
}

func hasFamily(svcs []*corev1.Service, v4 bool) bool {
	for _, s := range svcs {
		for _, ip := range s.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil && a.Is4() == v4 {
				return true
			}
		}
	}
	return false
}

func addrs(ss []string, v4 bool) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() == v4 {
			out = append(out, a)
		}
	}
	return out
}

// chainPort returns the Service port a kube-proxy chain is named after: its
// name is "<kind>-<8-character hash>-<namespace>/<name>/<protocol>/<port>"
// (servicePortChainNameBase in pkg/proxy/nftables/proxier.go).
func chainPort(chain string) string {
	for _, p := range []string{prefixService, prefixLocal, prefixExternal} {
		if rest, ok := strings.CutPrefix(chain, p); ok && len(rest) > 9 && rest[8] == '-' {
			return rest[9:]
		}
	}
	return ""
}

func compareService(in Input, t Table, chains map[string][]string, s *corev1.Service, v4 bool) []Finding {
	if s.Spec.ClusterIP == corev1.ClusterIPNone || s.Spec.ClusterIP == "" || s.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	name := s.Namespace + "/" + s.Name
	cips := addrs(s.Spec.ClusterIPs, v4)
	if len(cips) == 0 {
		return nil
	}
	var ext []string
	ext = append(ext, s.Spec.ExternalIPs...)
	if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ing.IP != "" && (ing.IPMode == nil || *ing.IPMode == corev1.LoadBalancerIPModeVIP) {
				ext = append(ext, ing.IP)
			}
		}
	}
	extIPs := addrs(ext, v4)
	_, known := in.Endpoints[name]
	var out []Finding
	for _, p := range s.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		port := fmt.Sprintf("%s/%s/%s/%s", s.Namespace, s.Name, proto, p.Name)
		cluster, hinted := in.Endpoints.Programmed(name, p.Name, p.Protocol, v4, false, in.Node)
		local, _ := in.Endpoints.Programmed(name, p.Name, p.Protocol, v4, true, in.Node)
		internal := cluster
		if s.Spec.InternalTrafficPolicy != nil && *s.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal {
			internal = local
		}
		check := func(ip netip.Addr, has bool) {
			k := ServiceKey{IP: ip, Protocol: proto, Port: uint16(p.Port)}
			chain, in := t.ServiceIPs[k]
			_, rejected := t.NoEndpoint[k]
			switch {
			case !known:
			case has && rejected:
				out = append(out, Finding{Kind: KindRejected, Family: t.Family, Service: name, Element: k.String()})
			case has && !in:
				out = append(out, Finding{Kind: KindServiceIPMissing, Family: t.Family, Service: name, Element: k.String()})
			case in && chainPort(chain) != port:
				out = append(out, Finding{Kind: KindWrongChain, Family: t.Family, Service: name, Element: k.String(), Chain: chain})
			}
		}
		for _, ip := range cips {
			check(ip, len(internal) > 0)
		}
		anyEP := len(cluster) > 0 || len(local) > 0
		for _, ip := range extIPs {
			check(ip, anyEP)
		}
		if p.NodePort != 0 && known && anyEP && (s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer) {
			k := PortKey{Protocol: proto, Port: uint16(p.NodePort)}
			if chain, ok := t.NodePorts[k]; !ok {
				out = append(out, Finding{Kind: KindNodePortMissing, Family: t.Family, Service: name, Element: fmt.Sprintf("%s . %d", proto, p.NodePort)})
			} else if chainPort(chain) != port {
				out = append(out, Finding{Kind: KindWrongChain, Family: t.Family, Service: name, Element: fmt.Sprintf("%s . %d", proto, p.NodePort), Chain: chain})
			}
		}
		if !known {
			continue
		}
		// The endpoints each chain DNATs to, against the model.
		for _, chain := range chains[port] {
			eps := t.DNAT[chain]
			var want []netip.AddrPort
			switch {
			case strings.HasPrefix(chain, prefixService):
				want = cluster
			case strings.HasPrefix(chain, prefixLocal):
				want = local
			default:
				continue // external- chains jump to the two above
			}
			for _, ep := range eps {
				if !slices.Contains(want, ep) {
					out = append(out, Finding{Kind: KindStaleEndpoint, Family: t.Family, Service: name, Chain: chain, Endpoint: ep.String()})
				}
			}
			if hinted {
				continue
			}
			for _, w := range want {
				if !slices.Contains(eps, w) {
					out = append(out, Finding{Kind: KindMissingEndpoint, Family: t.Family, Service: name, Chain: chain, Endpoint: w.String()})
				}
			}
		}
	}
	return out
}

// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"cmp"
	"crypto/sha256"
	"encoding/base32"
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
	// KindBlackHole: a LoadBalancer IP of a Service with
	// externalTrafficPolicy Local that this node announces (MetalLB's
	// ServiceL2Status) while kube-proxy drops it for want of a local
	// endpoint (its no-endpoint-services element says drop). A problem.
	KindBlackHole = "black-hole"
	// KindGhostElement: a service-ips, no-endpoint-services or
	// service-nodeports element of no Service. Advisory.
	KindGhostElement = "ghost-element"
	// KindGhostChain: a service-, local- or external- chain named after a
	// port of no Service that still has rules (kube-proxy flushes such a
	// chain at once and deletes it at its next sync, so a flushed one is
	// not a ghost). Advisory.
	KindGhostChain = "ghost-chain"
)

// AdvisoryGhostState is the advisory (ipvs_guard_advisory) ghost elements
// and chains publish.
const AdvisoryGhostState = "NFTablesGhostState"

// IsProblem reports whether findings of kind make KubeProxyDataplaneDegraded
// True: those that break traffic now. Ghosts are advisories.
func IsProblem(kind string) bool {
	return kind != KindGhostElement && kind != KindGhostChain
}

// Finding is one difference between kube-proxy's table and the cluster.
type Finding struct {
	Kind     string `json:"kind"`
	Family   string `json:"family"`
	Service  string `json:"service,omitempty"`
	Element  string `json:"element,omitempty"`
	Chain    string `json:"chain,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	// Map is the map of a ghost element.
	Map string `json:"map,omitempty"`
	// Rules is the rule count of a ghost chain.
	Rules int `json:"rules,omitempty"`
	// Problem is true when the finding makes KubeProxyDataplaneDegraded
	// True; false for an advisory.
	Problem bool `json:"problem"`
}

// Key identifies the finding across runs (the settle grace).
func (f Finding) Key() string {
	return strings.Join([]string{f.Kind, f.Family, f.Service, f.Element, f.Chain, f.Endpoint, f.Map}, "|")
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
	case KindIPTablesChainMissing:
		return iptablesChainMissing(f)
	case KindBlackHole:
		return fmt.Sprintf("%s: black hole: LoadBalancer IP %s of %s (externalTrafficPolicy Local) is announced by this node, which has no local endpoint: kube-proxy drops it (%s)", tbl, f.Element, f.Service, MapNoEndpoint)
	case KindGhostElement:
		return fmt.Sprintf("%s: %s element %s (%s) belongs to no Service (left behind)", tbl, f.Map, f.Element, f.Chain)
	case KindGhostChain:
		return fmt.Sprintf("%s: chain %s (%d rules) belongs to no Service and was not flushed (left behind)", tbl, f.Chain, f.Rules)
	}
	return f.Kind
}

// State implements check.Finding: an advisory publishes
// ipvs_guard_advisory{check="nftables-dataplane"} (severity info); a
// problem publishes nothing of its own (the condition says it).
func (f Finding) State() check.State {
	if f.Problem {
		return check.State{}
	}
	return check.State{Advisory: &check.AdvisoryState{Check: check.NameNFTablesDataplane, Advisory: AdvisoryGhostState, Severity: "info"}}
}

// Input is one comparison's input.
type Input struct {
	Tables   []Table
	Services []*corev1.Service
	// Endpoints are the EndpointSlices' summary (nil: endpoints not judged).
	Endpoints ipvsdrift.ServiceEndpoints
	Node      string
	// Announced are the LoadBalancer IPs this node announces (MetalLB's
	// ServiceL2Status); nil judges no black hole.
	Announced map[netip.Addr]bool
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
		if len(in.Services) > 0 {
			out = append(out, ghosts(t, in.Services, v4)...)
		}
	}
	for i := range out {
		out[i].Problem = IsProblem(out[i].Kind)
	}
	slices.SortFunc(out, func(a, b Finding) int { return cmp.Compare(a.Key(), b.Key()) })
	return out
}

// chainHash is the hash kube-proxy prefixes a Service port's chain names
// with: the first 8 characters of the base32 SHA-256 of
// "namespace/name/protocol/port" (hashAndTruncate in
// pkg/proxy/nftables/proxier.go). It identifies a chain whose name kube-proxy
// truncated.
func chainHash(port string) string {
	h := sha256.Sum256([]byte(port))
	return base32.StdEncoding.EncodeToString(h[:])[:8]
}

// ghosts returns the elements of kube-proxy's verdict maps and the Service
// port chains of no Service (every Service, whatever its endpoints: what
// kube-proxy programs for a Service that exists is compareService's).
func ghosts(t Table, svcs []*corev1.Service, v4 bool) []Finding {
	keys := make(map[ServiceKey]bool, 2*len(svcs))
	nodePorts := map[PortKey]bool{}
	ports := make(map[string]bool, len(svcs))
	for _, s := range svcs {
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		ips := append(append(slices.Clone(s.Spec.ClusterIPs), s.Spec.ClusterIP), s.Spec.ExternalIPs...)
		for _, ing := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, ing.IP)
		}
		for _, p := range s.Spec.Ports {
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			port := s.Namespace + "/" + s.Name + "/" + proto + "/" + p.Name
			ports[port] = true
			for _, ip := range addrs(ips, v4) {
				keys[ServiceKey{IP: ip, Protocol: proto, Port: uint16(p.Port)}] = true
			}
			if p.NodePort != 0 {
				nodePorts[PortKey{Protocol: proto, Port: uint16(p.NodePort)}] = true
			}
		}
	}
	var out []Finding
	for _, m := range []struct {
		name  string
		elems map[ServiceKey]string
	}{{MapServiceIPs, t.ServiceIPs}, {MapNoEndpoint, t.NoEndpoint}} {
		for k, v := range m.elems {
			if !keys[k] {
				out = append(out, Finding{Kind: KindGhostElement, Family: t.Family, Map: m.name, Element: k.String(), Chain: v})
			}
		}
	}
	for k, v := range t.NodePorts {
		if !nodePorts[k] {
			out = append(out, Finding{Kind: KindGhostElement, Family: t.Family, Map: MapNodePorts, Element: fmt.Sprintf("%s . %d", k.Protocol, k.Port), Chain: v})
		}
	}
	var hashes map[string]bool
	for c, n := range t.Rules {
		if n == 0 || !strings.Contains(c, "/") {
			continue
		}
		if ports[chainPort(c)] {
			continue
		}
		// A name kube-proxy truncated ("…...") is known by its hash: the
		// Service ports are hashed once, and only when a name is not
		// matched whole.
		h := chainHashOf(c)
		if h == "" {
			continue
		}
		if hashes == nil {
			hashes = map[string]bool{}
			for p := range ports {
				hashes[chainHash(p)] = true
			}
		}
		if hashes[h] {
			continue
		}
		out = append(out, Finding{Kind: KindGhostChain, Family: t.Family, Chain: c, Rules: n})
	}
	return out
}

// chainHashOf returns the hash in a service-, local- or external- chain's
// name ("" for another chain).
func chainHashOf(chain string) string {
	for _, p := range []string{prefixService, prefixLocal, prefixExternal} {
		if rest, ok := strings.CutPrefix(chain, p); ok && len(rest) > 9 && rest[8] == '-' {
			return rest[:8]
		}
	}
	return ""
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
	lbIPs := map[netip.Addr]bool{}
	for _, a := range addrs(ext[len(s.Spec.ExternalIPs):], v4) {
		lbIPs[a] = true
	}
	_, known := in.Endpoints[name]
	var out []Finding
	for _, p := range s.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		port := s.Namespace + "/" + s.Name + "/" + proto + "/" + p.Name
		cluster, hinted := in.Endpoints.Programmed(name, p.Name, p.Protocol, v4, false, in.Node)
		local, _ := in.Endpoints.Programmed(name, p.Name, p.Protocol, v4, true, in.Node)
		internal := cluster
		if s.Spec.InternalTrafficPolicy != nil && *s.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal {
			internal = local
		}
		etpLocal := s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
		// check judges one IP's elements: in service-ips when inIPs, in
		// no-endpoint-services only when !served (kube-proxy 1.37.1:
		// hasInternalEndpoints for a ClusterIP; hasEndpoints and
		// hasExternalEndpoints for an external IP).
		check := func(ip netip.Addr, inIPs, served, lbIP bool) {
			k := ServiceKey{IP: ip, Protocol: proto, Port: uint16(p.Port)}
			chain, listed := t.ServiceIPs[k]
			verdict, rejected := t.NoEndpoint[k]
			switch {
			case !known:
			case lbIP && etpLocal && rejected && verdict == "drop" && in.Announced[ip]:
				out = append(out, Finding{Kind: KindBlackHole, Family: t.Family, Service: name, Element: k.String()})
			case served && rejected:
				out = append(out, Finding{Kind: KindRejected, Family: t.Family, Service: name, Element: k.String()})
			case inIPs && !listed:
				out = append(out, Finding{Kind: KindServiceIPMissing, Family: t.Family, Service: name, Element: k.String()})
			case listed && chainPort(chain) != port:
				out = append(out, Finding{Kind: KindWrongChain, Family: t.Family, Service: name, Element: k.String(), Chain: chain})
			}
		}
		for _, ip := range cips {
			check(ip, len(internal) > 0, len(internal) > 0, false)
		}
		anyEP := len(cluster) > 0 || len(local) > 0
		external := anyEP && (!etpLocal || len(local) > 0)
		for _, ip := range extIPs {
			check(ip, anyEP, external, lbIPs[ip])
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

// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// AdvisoryAnnouncerNotPreferred names the arp check's advisory finding
// (AnnouncerNotPreferred): MetalLB's preferredNodeSelectors do not hold.
const AdvisoryAnnouncerNotPreferred = "ARPAnnouncerNotPreferred"

// AnnouncerNotPreferred is an advisory finding of the arp check: the node
// MetalLB's ServiceL2Status names as an IP's announcer weighs less, by the
// preferredNodeSelectors of the L2Advertisements that apply to its Service
// (MetalLB v0.16.2), than the node MetalLB's election prefers among the
// eligible nodes. The IP is answered; the preference does not hold (a node
// label missing or changed under the speakers, or the speakers split, as
// during a v0.16.1 → v0.16.2 upgrade). It never changes the check's status.
type AnnouncerNotPreferred struct {
	// Advisory is AdvisoryAnnouncerNotPreferred.
	Advisory string `json:"advisory"`
	// IP is the LoadBalancer IP.
	IP string `json:"ip"`
	// Service is its Service (namespace/name).
	Service string `json:"service"`
	// Announcer and AnnouncerWeight are the node ServiceL2Status names and
	// its summed preference weight.
	Announcer       string `json:"announcer"`
	AnnouncerWeight int64  `json:"announcer_weight"`
	// Preferred and PreferredWeight are the node MetalLB's election
	// prefers and its weight.
	Preferred       string `json:"preferred"`
	PreferredWeight int64  `json:"preferred_weight"`
	// Message says it in a sentence, with what to check.
	Message string `json:"message"`
}

// String implements check.Finding.
func (p AnnouncerNotPreferred) String() string { return p.Message }

// State implements check.Finding.
func (p AnnouncerNotPreferred) State() check.State {
	return check.State{ARPPreference: &check.ARPPreferenceState{IP: p.IP, Service: p.Service, Announcer: p.Announcer, Preferred: p.Preferred}}
}

// notPreferred says whether in's announcer weighs less than the node
// MetalLB's election prefers (nil when it does not, when no
// preferredNodeSelectors apply, or when the IP's pool or advertisements are
// not known), and whether preferredNodeSelectors apply to it. svc is the
// IP's Service from the cache; epNodes are read only for
// externalTrafficPolicy Local.
func notPreferred(st *metallbState, ns string, in LoadBalancerIngress, svc *corev1.Service, epNodes func() []string) (*AnnouncerNotPreferred, bool) {
	f := notPreferredFinding(st, ns, in, svc, epNodes)
	return f, f != nil || weighted(st, in, svc)
}

// weighted reports whether preferredNodeSelectors of an advertisement
// that applies to in's Service score any node.
func weighted(st *metallbState, in LoadBalancerIngress, svc *corev1.Service) bool {
	if st == nil || svc == nil {
		return false
	}
	ads := poolAds(st, in.IP)
	return preferredScores(adsForService(ads, svc.Labels), st.nodes) != nil
}

// poolAds returns the advertisements of the pool holding ip (none when no pool does).
func poolAds(st *metallbState, ip netip.Addr) []l2Ad {
	for i := range st.pools {
		if slices.ContainsFunc(st.pools[i].ranges, func(r addrRange) bool { return r.contains(ip.Unmap()) }) {
			var ads []l2Ad
			for _, a := range st.ads {
				if a.selectsPool(st.pools[i]) {
					ads = append(ads, a)
				}
			}
			return ads
		}
	}
	return nil
}

func notPreferredFinding(st *metallbState, ns string, in LoadBalancerIngress, svc *corev1.Service, epNodes func() []string) *AnnouncerNotPreferred {
	if st == nil || in.AnnouncingNode == "" || svc == nil {
		return nil
	}
	ads := adsForService(poolAds(st, in.IP), svc.Labels)
	scores := preferredScores(ads, st.nodes)
	if scores == nil {
		return nil
	}
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	var eps []string
	if local {
		eps = epNodes()
	}
	cands := candidates(st, ads, local, eps)
	if len(cands) == 0 {
		return nil
	}
	// MetalLB hashes the Service's first ingress IP, for every IP of it.
	first := in.IP
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 {
		if ip, err := netip.ParseAddr(ing[0].IP); err == nil {
			first = ip
		}
	}
	sortCandidates(cands, first, scores)
	winner := cands[0]
	if winner == in.AnnouncingNode || scores[in.AnnouncingNode] >= scores[winner] {
		return nil
	}
	names := make([]string, 0, len(ads))
	for _, a := range ads {
		if len(a.preferred) > 0 {
			names = append(names, ns+"/"+a.name)
		}
	}
	return &AnnouncerNotPreferred{
		Advisory: AdvisoryAnnouncerNotPreferred, IP: in.IP.String(), Service: in.Service.String(),
		Announcer: in.AnnouncingNode, AnnouncerWeight: scores[in.AnnouncingNode],
		Preferred: winner, PreferredWeight: scores[winner],
		Message: fmt.Sprintf(
			"%s (Service %s) is announced by node %s (preference weight %d), but the preferredNodeSelectors of L2Advertisement %s make MetalLB prefer node %s (weight %d) among the eligible nodes %s: check node %s's labels and speaker, and whether the speakers are split (a v0.16.1 → v0.16.2 upgrade, or a memberlist partition: kubectl -n %s logs -l component=speaker)",
			in.IP, in.Service, in.AnnouncingNode, scores[in.AnnouncingNode], strings.Join(names, ", "), winner, scores[winner], joinNodes(cands), winner, ns),
	}
}

// preferenceMemo remembers, per probed IP, the announcer it last judged
// and its finding, so that MetalLB's state is read only when an announcer
// changes or while a finding stands.
type preferenceMemo struct {
	mu sync.Mutex
	m  map[netip.Addr]preferenceEntry
}

type preferenceEntry struct {
	announcer string
	// changed is when this node first saw announcer for the IP.
	changed time.Time
	// judged is when it was last judged, weighted whether
	// preferredNodeSelectors applied to it then.
	judged   time.Time
	weighted bool
	finding  *AnnouncerNotPreferred
}

// preferenceRecheck is how many MetalLB state TTLs an IP whose Service
// has preferredNodeSelectors is judged again after, though its announcer
// stays: a preferred node's label added back, or its speaker gone from the
// memberlist while its Pod stays Ready, moves nothing.
const preferenceRecheck = 5

// preferences returns the AnnouncerNotPreferred findings of targets (the
// IPs this node probes), sorted by IP. MetalLB's state is read (at most
// once per MetalLBStateTTL, metallb.go) only for an IP whose announcer this
// node has not judged yet or that has changed since (then the state must
// be newer than the change), whose finding stands, or, every
// preferenceRecheck TTLs, whose Service has preferredNodeSelectors; an IP
// without them whose announcer stays costs no read.
func (v *View) preferences(ctx context.Context, targets []arpcheck.Target) []AnnouncerNotPreferred {
	m := &v.preference
	m.mu.Lock()
	defer m.mu.Unlock()
	next := make(map[netip.Addr]preferenceEntry, len(targets))
	now := v.metallb.clock.Now()
	var out []AnnouncerNotPreferred
	for _, t := range targets {
		ip := t.IP.Unmap()
		if t.ExpectedNode == "" {
			continue
		}
		e, ok := m.m[ip]
		recheck := e.weighted && now.Sub(e.judged) >= preferenceRecheck*v.metallb.ttl
		if ok && e.announcer == t.ExpectedNode && e.finding == nil && !recheck {
			next[ip] = e
			continue
		}
		if !ok || e.announcer != t.ExpectedNode {
			e = preferenceEntry{announcer: t.ExpectedNode, changed: now}
		}
		in := LoadBalancerIngress{IP: ip, AnnouncingNode: t.ExpectedNode}
		if ns, name, found := strings.Cut(t.Service, "/"); found {
			in.Service = types.NamespacedName{Namespace: ns, Name: name}
		}
		st := v.metallb.getSince(ctx, e.changed)
		svc, _ := v.services.Services(in.Service.Namespace).Get(in.Service.Name)
		e.finding, e.judged, e.weighted = nil, now, false
		if st.err == nil {
			e.finding, e.weighted = notPreferred(st, v.metallb.namespace, in, svc, func() []string {
				return v.readyEndpointNodes(ctx, in.Service.Namespace, in.Service.Name)
			})
		}
		next[ip] = e
		if e.finding != nil {
			out = append(out, *e.finding)
		}
	}
	m.m = next
	slices.SortFunc(out, func(a, b AnnouncerNotPreferred) int {
		return netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP))
	})
	return out
}

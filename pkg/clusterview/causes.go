// SPDX-License-Identifier: Apache-2.0

package clusterview

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// Causes of an unanswered LoadBalancer IP (stable, UpperCamelCase: the
// cause label of ipvs_guard_arp_no_reply_cause and the cause of diagnose's
// arp findings). Each names the object to fix.
const (
	// CauseNotFromPool: the IP is in no IPAddressPool, so MetalLB announces
	// it nowhere (set by hand, or its pool was deleted).
	CauseNotFromPool = "NotFromAnyPool"
	// CauseNoL2Advertisement: the IP's pool is selected by no L2Advertisement.
	CauseNoL2Advertisement = "NoL2Advertisement"
	// CauseServiceSelectors: L2Advertisements select the IP's pool, but
	// the serviceSelectors of every one of them (MetalLB ≥ 0.16.0) leave
	// the Service out: no L2Advertisement selects this Service.
	CauseServiceSelectors = "L2AdvertisementServiceSelectors"
	// CauseSharedIPWithServiceSelectors: the Service carries MetalLB's
	// allow-shared-ip annotation and an L2Advertisement that selects it has
	// serviceSelectors, which MetalLB v0.16.2 refuses to announce.
	CauseSharedIPWithServiceSelectors = "SharedIPWithServiceSelectors"
	// CauseNoReadyEndpoints: the Service has no ready endpoint; MetalLB
	// announces only a Service with one.
	CauseNoReadyEndpoints = "NoReadyEndpoints"
	// CauseNodeSelectors: no node matches the nodeSelectors of the
	// L2Advertisements of the IP's pool.
	CauseNodeSelectors = "L2AdvertisementNodeSelectors"
	// CauseExcludedByLabel: the nodes with a ready speaker the
	// advertisements select carry node.kubernetes.io/exclude-from-external-load-balancers.
	CauseExcludedByLabel = "NodesExcludedFromLoadBalancers"
	// CauseNetworkUnavailable: the nodes with a ready speaker the
	// advertisements select have NetworkUnavailable=True.
	CauseNetworkUnavailable = "NodeNetworkUnavailable"
	// CauseNoReadySpeaker: no node the advertisements select runs a ready speaker.
	CauseNoReadySpeaker = "NoReadySpeaker"
	// CauseLocalEndpointsWithoutSpeaker: externalTrafficPolicy Local, and
	// no node with a ready endpoint may announce.
	CauseLocalEndpointsWithoutSpeaker = "LocalEndpointsWithoutSpeaker"
	// CauseSpeakerNotAnnouncing: some node may announce the IP by
	// MetalLB's rules and none does (interfaces, memberlist, speaker logs).
	CauseSpeakerNotAnnouncing = "SpeakerNotAnnouncing"
	// CauseAnnouncerIneligible: the node ServiceL2Status names may not
	// announce any more (label, NetworkUnavailable, speaker not ready).
	CauseAnnouncerIneligible = "AnnouncerIneligible"
	// CauseUnknown: MetalLB's configuration could not be read; the
	// message says what is known.
	CauseUnknown = "Unknown"
)

// Cause says why a LoadBalancer IP is not answered: Reason is one of the
// Cause* constants, Message names the object to fix. The zero Cause says
// nothing is known.
type Cause struct {
	Reason  string
	Message string
}

// maxNamed bounds the nodes a cause names in one list.
const maxNamed = 10

// Explain says why in, found unanswered by this node's probe, is not
// answered, from MetalLB's state as its speakers read it (v0.16.2,
// speaker/layer2_controller.go): an IP is announced only if it is in an
// IPAddressPool, an L2Advertisement selects that pool and, by its
// serviceSelectors, the Service (without allow-shared-ip when it has
// serviceSelectors), the Service has a ready endpoint, and a node the
// advertisement's nodeSelectors select has
// a speaker in the memberlist, has no NetworkUnavailable=True condition
// and no node.kubernetes.io/exclude-from-external-load-balancers label
// (and, with externalTrafficPolicy Local, a ready endpoint).
//
// It reads MetalLB's state on demand (at most once per MetalLBStateTTL,
// metallb.go) and the Service's EndpointSlices (EndpointsTTL); call it only
// for an IP found unanswered.
func (v *View) Explain(ctx context.Context, in LoadBalancerIngress) Cause {
	if len(in.Contenders) > 0 {
		return Cause{}
	}
	st := v.metallb.get(ctx)
	if st.err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot read MetalLB's state to explain an unanswered LoadBalancer IP", "ip", in.IP, "err", st.err)
		if msg := v.Unannounced(ctx, in); msg != "" {
			return Cause{Reason: CauseUnknown, Message: msg}
		}
		return Cause{}
	}
	if in.AnnouncingNode != "" {
		return announcerCause(st, in.AnnouncingNode)
	}
	ns := v.metallb.namespace
	var p *pool
	for i := range st.pools {
		if slices.ContainsFunc(st.pools[i].ranges, func(r addrRange) bool { return r.contains(in.IP.Unmap()) }) {
			p = &st.pools[i]
			break
		}
	}
	if p == nil {
		return Cause{Reason: CauseNotFromPool, Message: fmt.Sprintf(
			"%s is in no IPAddressPool in %s, so no speaker announces it (set by hand, or its pool was deleted): give Service %s an address of a pool, or add a pool holding it (kubectl -n %s get ipaddresspools)",
			in.IP, ns, in.Service, ns)}
	}
	var ads []l2Ad
	for _, a := range st.ads {
		if a.selectsPool(*p) {
			ads = append(ads, a)
		}
	}
	if len(ads) == 0 {
		return Cause{Reason: CauseNoL2Advertisement, Message: fmt.Sprintf(
			"IPAddressPool %s/%s is selected by no L2Advertisement, so MetalLB assigns its addresses and announces none: add an L2Advertisement naming it in spec.ipAddressPools (kubectl -n %s get l2advertisements)",
			ns, p.name, ns)}
	}
	svc, _ := v.services.Services(in.Service.Namespace).Get(in.Service.Name)
	var svcLabels map[string]string
	if svc != nil {
		svcLabels = svc.Labels
	}
	poolAds := ads
	if ads = adsForService(poolAds, svcLabels); len(ads) == 0 {
		return Cause{Reason: CauseServiceSelectors, Message: fmt.Sprintf(
			"no L2Advertisement selects this Service: the serviceSelectors of %s (the L2Advertisements of IPAddressPool %s/%s) match none of Service %s's labels (%s), so no speaker announces it: label the Service to match one, or change the serviceSelectors (kubectl -n %s get l2advertisements -o yaml)",
			describeServiceSelectors(ns, poolAds), ns, p.name, in.Service, labelsText(svcLabels), ns)}
	}
	if svc != nil && sharingKey(svc) != "" && slices.ContainsFunc(ads, func(a l2Ad) bool { return len(a.serviceSelectors) > 0 }) {
		return Cause{Reason: CauseSharedIPWithServiceSelectors, Message: fmt.Sprintf(
			"Service %s carries MetalLB's %s annotation and is selected by serviceSelectors of %s, which MetalLB (≥ 0.16.0) refuses to announce together: drop the annotation, or announce it through an L2Advertisement without serviceSelectors",
			in.Service, AllowSharedIPAnnotation, describeServiceSelectors(ns, ads))}
	}
	adNames := make([]string, len(ads))
	for i, a := range ads {
		adNames[i] = ns + "/" + a.name
	}
	local := svc != nil && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	epNodes := v.readyEndpointNodes(ctx, in.Service.Namespace, in.Service.Name)
	if len(epNodes) == 0 {
		return Cause{Reason: CauseNoReadyEndpoints, Message: fmt.Sprintf(
			"Service %s has no ready endpoint, and MetalLB announces a Service only while it has one: fix its Pods (kubectl -n %s get endpointslices -l kubernetes.io/service-name=%s)",
			in.Service, in.Service.Namespace, in.Service.Name)}
	}
	var selected []string
	for name, n := range st.nodes {
		if slices.ContainsFunc(ads, func(a l2Ad) bool { return a.selectsNode(n) }) {
			selected = append(selected, name)
		}
	}
	slices.Sort(selected)
	if len(selected) == 0 {
		return Cause{Reason: CauseNodeSelectors, Message: fmt.Sprintf(
			"no node matches the nodeSelectors of L2Advertisement %s: fix its nodeSelectors or the nodes' labels",
			strings.Join(adNames, ", "))}
	}
	var eligible, excluded, unavailable, noSpeaker []string
	why := map[string]string{}
	for _, name := range selected {
		n := st.nodes[name]
		switch {
		case !st.speakers[name]:
			noSpeaker = append(noSpeaker, name)
			why[name] = "no ready speaker"
		case n.excluded:
			excluded = append(excluded, name)
			why[name] = "labelled " + ExcludeFromLoadBalancersLabel
		case n.networkUnavailable:
			unavailable = append(unavailable, name)
			why[name] = "NetworkUnavailable=True"
		default:
			eligible = append(eligible, name)
		}
	}
	if local {
		var here []string
		for _, n := range epNodes {
			if slices.Contains(eligible, n) {
				here = append(here, n)
			}
		}
		if len(here) == 0 && len(eligible) > 0 {
			parts := make([]string, len(epNodes))
			for i, n := range epNodes {
				w := why[n]
				if w == "" {
					w = "not selected by " + strings.Join(adNames, ", ")
				}
				parts[i] = n + " (" + w + ")"
			}
			return Cause{Reason: CauseLocalEndpointsWithoutSpeaker, Message: fmt.Sprintf(
				"externalTrafficPolicy of Service %s is Local, so only a node with a ready endpoint and an eligible speaker may announce it; its ready endpoints are on %s, the eligible nodes are %s: schedule an endpoint there or make an endpoint's node eligible",
				in.Service, joinNodes(parts), joinNodes(eligible))}
		}
		eligible = here
	}
	if len(eligible) > 0 {
		var ifaces []string
		for _, a := range ads {
			ifaces = append(ifaces, a.interfaces...)
		}
		ifs := "any interface"
		if len(ifaces) > 0 {
			ifs = "interfaces " + strings.Join(sortedSet(ifaces...), ", ")
		}
		return Cause{Reason: CauseSpeakerNotAnnouncing, Message: fmt.Sprintf(
			"MetalLB's rules let %s announce it (selected by L2Advertisement %s, ready speaker, not excluded, network available) and no speaker does: check that those nodes have %s, the speakers' memberlist and logs (kubectl -n %s logs -l component=speaker)",
			joinNodes(eligible), strings.Join(adNames, ", "), ifs, ns)}
	}
	var parts []string
	if len(excluded) > 0 {
		parts = append(parts, fmt.Sprintf("%s labelled %s (remove the label, or run the speakers with --ignore-exclude-lb)", joinNodes(excluded), ExcludeFromLoadBalancersLabel))
	}
	if len(unavailable) > 0 {
		parts = append(parts, fmt.Sprintf("%s with NetworkUnavailable=True (the network plugin has not set it False)", joinNodes(unavailable)))
	}
	if len(noSpeaker) > 0 {
		parts = append(parts, fmt.Sprintf("%s without a ready speaker Pod (kubectl -n %s get pods -l %s -o wide; the DaemonSet's nodeSelector and tolerations)", joinNodes(noSpeaker), ns, v.metallb.speakers))
	}
	reason := CauseNoReadySpeaker
	switch {
	case len(excluded) > 0:
		reason = CauseExcludedByLabel
	case len(unavailable) > 0:
		reason = CauseNetworkUnavailable
	}
	return Cause{Reason: reason, Message: fmt.Sprintf("no node may announce it: of the nodes L2Advertisement %s selects, %s",
		strings.Join(adNames, ", "), strings.Join(parts, "; "))}
}

// announcerCause says why the node ServiceL2Status names may not answer
// for the IP any more; the zero Cause when MetalLB's rules still let it.
func announcerCause(st *metallbState, node string) Cause {
	n, known := st.nodes[node]
	var why string
	switch {
	case !known:
		why = "no such Node"
	case !st.speakers[node]:
		why = "no ready speaker Pod on it"
	case n.excluded:
		why = "it is labelled " + ExcludeFromLoadBalancersLabel
	case n.networkUnavailable:
		why = "its NetworkUnavailable condition is True"
	default:
		return Cause{}
	}
	return Cause{Reason: CauseAnnouncerIneligible, Message: fmt.Sprintf(
		"ServiceL2Status names node %s as its announcer, which may not announce: %s", node, why)}
}

// describeServiceSelectors names each advertisement with its
// serviceSelectors, e.g. "L2Advertisement metallb-system/web (serviceSelectors: app=web)".
func describeServiceSelectors(ns string, ads []l2Ad) string {
	parts := make([]string, 0, len(ads))
	for _, a := range ads {
		sel := "none: every Service"
		if len(a.serviceSelectorText) > 0 {
			sel = strings.Join(a.serviceSelectorText, " or ")
		}
		parts = append(parts, fmt.Sprintf("L2Advertisement %s/%s (serviceSelectors: %s)", ns, a.name, sel))
	}
	if len(parts) > maxNamed {
		return fmt.Sprintf("%s and %d more", strings.Join(parts[:maxNamed], ", "), len(parts)-maxNamed)
	}
	return strings.Join(parts, ", ")
}

// labelsText says labels as k=v pairs, sorted ("none" when there are none).
func labelsText(l map[string]string) string {
	if len(l) == 0 {
		return "none"
	}
	return labels.Set(l).String()
}

// joinNodes lists names, at most maxNamed of them.
func joinNodes(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}

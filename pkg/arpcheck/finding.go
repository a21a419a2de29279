// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// Finding is the arp check's observation for one IP. Its JSON shape is part
// of the CLI contract (docs/design.md §8): ip, interface, result, macs, rtt_seconds,
// family, plus optional context fields that are left out when empty.
type Finding struct {
	// IP is the probed address.
	IP string `json:"ip"`
	// Family is the address's family: ipv4 (probed with ARP) or ipv6 (NDP).
	Family Family `json:"family"`
	// Interface is where it was probed.
	Interface string `json:"interface"`
	// Result is the verdict.
	Result Result `json:"result"`
	// MACs are the distinct responders, sorted; never null.
	MACs []string `json:"macs"`
	// RTTSeconds is the round-trip time of the first reply; 0 when none.
	RTTSeconds float64 `json:"rtt_seconds"`
	// ExpectedMACs are the MACs allowed to answer, when known.
	ExpectedMACs []string `json:"expected_macs,omitempty"`
	// ExpectedNode is the node said to announce the IP, when known.
	ExpectedNode string `json:"expected_node,omitempty"`
	// ResponderNodes names the node owning each MAC in MACs ("" when unknown),
	// when a Directory is configured and knows at least one of them.
	ResponderNodes []string `json:"responder_nodes,omitempty"`
	// Service is the Service (namespace/name) the IP belongs to, when known.
	Service string `json:"service,omitempty"`
	// Unannounced says why no node announces the IP, when the cluster's
	// MetalLB state tells (no ServiceL2Status for it).
	Unannounced string `json:"unannounced,omitempty"`
	// Cause names why the IP is not answered (a stable UpperCamelCase
	// name, e.g. NoL2Advertisement), when known; Unannounced then says it.
	Cause string `json:"cause,omitempty"`
	// ExpectedInterfaces are the interfaces MetalLB announces the IP on
	// (ServiceL2Status status.interfaces), when known.
	ExpectedInterfaces []string `json:"expected_interfaces,omitempty"`
	// ResponderInterface is the interface whose MAC answered, as its node
	// published it, when known and the verdict is about the reply's way
	// (reply-from-other-interface, reply-from-down-interface).
	ResponderInterface string `json:"responder_interface,omitempty"`
	// AnnouncerChanges counts the changes of the answering MAC this node
	// saw for the IP in the last hour; above FlapThreshold the IP flaps.
	AnnouncerChanges int `json:"announcer_changes_last_hour,omitempty"`
	// Failover is set on the probe that saw the answering MAC change.
	Failover *Failover `json:"failover,omitempty"`
}

// Failover is one change of the MAC answering for an IP, as this node's
// probes saw it.
type Failover struct {
	// FromMAC and ToMAC are the MACs that answered before and after.
	FromMAC string `json:"from_mac"`
	ToMAC   string `json:"to_mac"`
	// FromNode and ToNode name their nodes, when known.
	FromNode string `json:"from_node,omitempty"`
	ToNode   string `json:"to_node,omitempty"`
	// UnansweredSeconds estimates how long the IP went unanswered: from
	// halfway between the last answer and the first probe left unanswered
	// to halfway between the last unanswered probe and the new answer, so
	// it is off by at most half the time between probes. 0 when no probe
	// went unanswered.
	UnansweredSeconds float64 `json:"unanswered_seconds"`
}

// String renders the finding as one line, e.g.
// "10.0.0.5 on eth0: conflict, 2 MACs answer: 52:54:00:00:00:01 (node-a), 52:54:00:00:00:02".
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.IP)
	if f.Service != "" {
		fmt.Fprintf(&b, " (%s)", f.Service)
	}
	fmt.Fprintf(&b, " on %s: %s", f.Interface, f.Result)
	switch f.Result {
	case ResultNoReply:
		b.WriteString(", no MAC answered")
		if f.Unannounced != "" {
			b.WriteString(": ")
			b.WriteString(f.Unannounced)
		}
	case ResultConflict:
		fmt.Fprintf(&b, ", %d MACs answer: %s", len(f.MACs), f.responders())
	case ResultAnswered, ResultWrongResponder, ResultOtherInterface, ResultDownInterface:
		fmt.Fprintf(&b, " by %s in %s", f.responders(), formatRTT(f.RTTSeconds))
	}
	switch {
	case f.Result == ResultOtherInterface && f.ResponderInterface != "":
		fmt.Fprintf(&b, ", the MAC of %s, not of %s", f.ResponderInterface, strings.Join(f.ExpectedInterfaces, " or "))
	case f.Result == ResultDownInterface && f.ResponderInterface != "":
		fmt.Fprintf(&b, ", the MAC of %s, which is down", f.ResponderInterface)
	}
	if f.Result == ResultWrongResponder || (f.Result == ResultConflict && (len(f.ExpectedMACs) > 0 || f.ExpectedNode != "")) {
		b.WriteString(", expected ")
		b.WriteString(f.expected())
	}
	return b.String()
}

// State implements check.Finding: the probe's ipvs_guard_arp_* state. A
// finding without a verdict publishes nothing.
func (f Finding) State() check.State {
	if f.IP == "" || f.Result == ResultUnknown {
		return check.State{}
	}
	family := f.Family
	if ip, err := netip.ParseAddr(f.IP); family == "" && err == nil {
		family = FamilyOf(ip)
	}
	return check.State{ARP: &check.ARPState{
		IP:         f.IP,
		Family:     string(family),
		Interface:  f.Interface,
		Result:     f.Result.String(),
		Responders: len(f.MACs),
		RTTSeconds: f.RTTSeconds,
		Service:    f.Service,

		AnnouncerChanges: f.AnnouncerChanges,
		Failover:         f.Failover != nil,
		FailoverSeconds:  failoverSeconds(f.Failover),
		Cause:            f.Cause,
	}}
}

// responders lists the MACs with their node names where known.
func (f Finding) responders() string {
	parts := make([]string, len(f.MACs))
	for i, m := range f.MACs {
		parts[i] = m
		if i < len(f.ResponderNodes) && f.ResponderNodes[i] != "" {
			parts[i] += " (" + f.ResponderNodes[i] + ")"
		}
	}
	return strings.Join(parts, ", ")
}

func (f Finding) expected() string {
	s := strings.Join(f.ExpectedMACs, " or ")
	switch {
	case s == "":
		return "node " + f.ExpectedNode
	case f.ExpectedNode != "":
		return s + " (" + f.ExpectedNode + ")"
	default:
		return s
	}
}

func formatRTT(sec float64) string {
	us := sec * 1e6
	if us < 1000 {
		return fmt.Sprintf("%.0fµs", us)
	}
	return fmt.Sprintf("%.2fms", us/1000)
}

func failoverSeconds(f *Failover) float64 {
	if f == nil {
		return 0
	}
	return f.UnansweredSeconds
}

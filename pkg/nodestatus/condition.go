// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionType is the type of a Node condition ipvs-guard owns. The values
// are API: stable, UpperCamelCase.
type ConditionType string

// The condition types ipvs-guard owns. For each, True means a problem, as for
// kubelet's *Pressure conditions.
const (
	// IPVSModulesMissing is True when a required module is not loaded, not
	// available in this kernel or not declared for boot, or a stale
	// declaration would make systemd-modules-load fail.
	IPVSModulesMissing ConditionType = "IPVSModulesMissing"
	// KubeProxyIPVSDegraded is True when kube-proxy is not in IPVS mode though
	// configured for it, kube-ipvs0 is missing, VIPs lack virtual servers or
	// the scheduler does not match: the IPVS prerequisites.
	KubeProxyIPVSDegraded ConditionType = "KubeProxyIPVSDegraded"
	// KubeProxyDataplaneDegraded is True, in every proxy mode, when
	// kube-proxy has stopped syncing its rules, its transactions keep
	// failing or its full syncs outlast its sync period, or its programmed
	// rules (the IPVS table's real servers, the nftables table) differ from
	// the Services and EndpointSlices.
	KubeProxyDataplaneDegraded ConditionType = "KubeProxyDataplaneDegraded"
	// StrictARPDisabled is True when LoadBalancer IPs sit on kube-ipvs0 and
	// arp_ignore/arp_announce let this node answer ARP for them.
	StrictARPDisabled ConditionType = "StrictARPDisabled"
	// LoadBalancerARPFailing is True when an IP this node probes got no reply,
	// several MACs, or the wrong MAC.
	LoadBalancerARPFailing ConditionType = "LoadBalancerARPFailing"
)

// AllConditionTypes lists every owned condition type in publishing order.
func AllConditionTypes() []ConditionType {
	return []ConditionType{IPVSModulesMissing, KubeProxyIPVSDegraded, KubeProxyDataplaneDegraded, StrictARPDisabled, LoadBalancerARPFailing}
}

// Status is a condition's status. True means a problem.
type Status string

// Condition statuses, with the same spelling as the Kubernetes API.
const (
	// StatusTrue means the problem the condition type names is present.
	StatusTrue Status = "True"
	// StatusFalse means the problem is absent (or there was nothing to check).
	StatusFalse Status = "False"
	// StatusUnknown means the check could not run or has not run yet.
	StatusUnknown Status = "Unknown"
)

// Condition is ipvs-guard's own view of one Node condition, converted to and
// from the API type only at the edge (ToNodeCondition / FromNodeCondition).
type Condition struct {
	// Type is the condition type.
	Type ConditionType
	// Status is True (problem), False or Unknown.
	Status Status
	// Reason is a stable UpperCamelCase token.
	Reason string
	// Message names the exact module, IP, MAC or sysctl and the fix.
	Message string
	// LastTransitionTime is when Status last changed; the Manager sets it.
	LastTransitionTime time.Time
}

// ToNodeCondition converts c to the API type, stamping heartbeat as the
// lastHeartbeatTime.
func ToNodeCondition(c Condition, heartbeat time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type:               corev1.NodeConditionType(c.Type),
		Status:             corev1.ConditionStatus(c.Status),
		Reason:             c.Reason,
		Message:            c.Message,
		LastTransitionTime: metav1.NewTime(c.LastTransitionTime),
		LastHeartbeatTime:  metav1.NewTime(heartbeat),
	}
}

// FromNodeCondition converts an API condition to ipvs-guard's type.
func FromNodeCondition(nc corev1.NodeCondition) Condition {
	return Condition{
		Type:               ConditionType(nc.Type),
		Status:             Status(nc.Status),
		Reason:             nc.Reason,
		Message:            nc.Message,
		LastTransitionTime: nc.LastTransitionTime.Time,
	}
}

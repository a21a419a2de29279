// SPDX-License-Identifier: Apache-2.0

package check

// State is the typed state one finding publishes as metrics (docs/design.md §8). The
// metrics collector reads it through [Finding.State] and knows no checking
// package: a check that observes a new kind of state adds a field here and
// its metric families in pkg/metrics, and the collector's tests fail until
// every field has a mapping.
//
// Each field is one kind of state; nil fields publish nothing, so the zero
// State is what a finding that is only text (a sysctl, one virtual server)
// returns. A finding publishes at most a few kinds, usually one.
type State struct {
	// Module is the state of one required kernel module
	// (ipvs_guard_modules_*).
	Module *ModuleState
	// KubeProxy is what kube-proxy reports (ipvs_guard_kube_proxy_*).
	KubeProxy *KubeProxyState
	// IPVSTable is the size of the node's IPVS table
	// (ipvs_guard_ipvs_virtual_servers*).
	IPVSTable *IPVSTableState
	// ARP is the verdict of one probe of a LoadBalancer IP
	// (ipvs_guard_arp_*).
	ARP *ARPState
	// LBIPConflict is a LoadBalancer IP something else claims too
	// (ipvs_guard_lb_ip_conflict).
	LBIPConflict *LBIPConflictState
	// ARPPreference is a LoadBalancer IP announced by another node than
	// the one MetalLB's preferredNodeSelectors prefer
	// (ipvs_guard_arp_announcer_not_preferred).
	ARPPreference *ARPPreferenceState
	// KubeProxySync is kube-proxy's sync freshness for one IP family
	// (ipvs_guard_kube_proxy_sync_*).
	KubeProxySync *KubeProxySyncState
	// Advisory is one advisory finding (ipvs_guard_advisory).
	Advisory *AdvisoryState
	// Sysctl is the value of one sysctl or IPVS timeout a check judged
	// (ipvs_guard_sysctl_value).
	Sysctl *SysctlState
	// Conntrack is the netfilter connection table's use
	// (ipvs_guard_conntrack_*).
	Conntrack *ConntrackState
	// Readiness is one finding of the nftables-readiness report
	// (ipvs_guard_nftables_readiness_findings).
	Readiness *ReadinessState
	// Leftover is one thing IPVS mode left behind (ipvs_guard_ipvs_leftovers).
	Leftover *LeftoverState
	// IPVSDrift counts what the IPVS table and the cluster disagree on
	// (ipvs_guard_ipvs_drift_*).
	IPVSDrift *IPVSDriftState
}

// KubeProxySyncState is kube-proxy's sync freshness for one IP family.
type KubeProxySyncState struct {
	// IPFamily is kube-proxy's ip_family (IPv4, IPv6).
	IPFamily string
	// LastSyncSeconds and LastQueuedSeconds are Unix times (0: never).
	LastSyncSeconds, LastQueuedSeconds float64
	// HealthTimeoutSeconds is kube-proxy's health timeout.
	HealthTimeoutSeconds float64
	// Stale is true when an update has waited longer than the health timeout.
	Stale bool
}

// AdvisoryState is one advisory: a setting that is risky but does not break
// traffic now (docs/design.md §3b), never a condition.
type AdvisoryState struct {
	// Check is the check that found it.
	Check string
	// Advisory is its stable UpperCamelCase name.
	Advisory string
	// Severity is info or warning.
	Severity string
}

// SysctlState is the value of one sysctl (or IPVS timeout) a check judged.
type SysctlState struct {
	// Name is the sysctl's dotted name (net.ipv4.vs.conn_reuse_mode), or
	// for an IPVS timeout ipvs.timeout.tcp, ipvs.timeout.tcpfin, ipvs.timeout.udp.
	Name string
	// Value is its value.
	Value float64
}

// ConntrackState is the use of the netfilter connection tracking table.
type ConntrackState struct {
	// Entries is nf_conntrack_count.
	Entries float64
	// Max is nf_conntrack_max.
	Max float64
}

// ReadinessState is one finding of the nftables-readiness report.
type ReadinessState struct {
	// Kind is the finding's kind (kernel-version, nft-expression, …).
	Kind string
	// Severity is blocker, change or info.
	Severity string
}

// LeftoverState is one thing IPVS mode left on the node.
type LeftoverState struct {
	// Kind is kube-ipvs0, virtual-server, ipset, sysctl or modules-load-file.
	Kind string
}

// IPVSDriftState counts the divergences between the IPVS table and the
// cluster.
type IPVSDriftState struct {
	// Findings counts the findings by kind (ipvsdrift.Kinds).
	Findings map[string]int
	// GoneBackendConnections counts IPVS connection entries whose real
	// server is no endpoint of its Service any more.
	GoneBackendConnections map[ServiceProtocol]int
}

// ServiceProtocol is a Service ("namespace/name") and a protocol.
type ServiceProtocol struct {
	// Service is "namespace/name".
	Service string
	// Protocol is TCP, UDP or SCTP.
	Protocol string
}

// ModuleState is the state of one required kernel module.
type ModuleState struct {
	// Module is the module name (the module label).
	Module string
	// Loaded is true when the module is loaded or built in.
	Loaded bool
	// Available is true when the running kernel ships it, on disk or built in.
	Available bool
	// Declared is true when a modules-load.d file declares it for boot.
	Declared bool
	// Stale is true when it is declared for boot but absent from the kernel.
	Stale bool
}

// KubeProxyState is what kube-proxy reports about itself.
type KubeProxyState struct {
	// Mode is the proxy mode from /proxyMode ("" when unknown).
	Mode string
	// StrictARP is IPVS strictARP from /configz (nil when unknown).
	StrictARP *bool
}

// IPVSTableState is the size of the node's IPVS table.
type IPVSTableState struct {
	// VirtualServers is the number of virtual servers.
	VirtualServers int
	// WithoutRealServers counts the virtual servers whose Service has ready
	// endpoints but which have no real servers (nil when it cannot be known,
	// e.g. without a kubeconfig).
	WithoutRealServers *int
}

// ARPState is the verdict of one probe of a LoadBalancer IP. A probe without
// a verdict publishes no ARPState.
type ARPState struct {
	// IP is the probed address.
	IP string
	// Family is the address's family: ipv4 (probed with ARP) or ipv6 (NDP).
	Family string
	// Interface is where it was probed.
	Interface string
	// Result is the verdict: answered, no-reply, conflict, wrong-responder,
	// reply-from-other-interface or reply-from-down-interface.
	Result string
	// Responders is the number of distinct MACs that answered.
	Responders int
	// RTTSeconds is the round-trip time of the first reply; 0 when none.
	RTTSeconds float64
	// Service is the IP's Service (namespace/name), empty when unknown.
	Service string
	// AnnouncerChanges counts the changes of the answering MAC seen in the
	// last hour.
	AnnouncerChanges int
	// Failover is set when this probe saw the answering MAC change;
	// FailoverSeconds is then how long the IP went unanswered (0: no probe
	// went unanswered).
	Failover        bool
	FailoverSeconds float64
	// Cause names why the IP is not answered, when known
	// (ipvs_guard_arp_no_reply_cause).
	Cause string
}

// ARPPreferenceState is one LoadBalancer IP whose announcer (MetalLB's
// ServiceL2Status) is not the node MetalLB's preferredNodeSelectors weights
// prefer among the eligible nodes: an advisory, never a condition.
type ARPPreferenceState struct {
	// IP is the LoadBalancer IP.
	IP string
	// Service is its Service (namespace/name).
	Service string
	// Announcer is the node ServiceL2Status names.
	Announcer string
	// Preferred is the node MetalLB's weighting elects.
	Preferred string
}

// LBIPConflictState is one LoadBalancer IP that something besides its
// Service claims: a node's address, an interface of this node, or another
// Service that does not share it by MetalLB's rules.
type LBIPConflictState struct {
	// IP is the LoadBalancer IP.
	IP string
	// Kind is what else claims it: node-address, interface or service.
	Kind string
	// Owner is the IP's Service (namespace/name).
	Owner string
	// Other names the other claimant: node/address type, node/interface, or
	// the other Service (namespace/name).
	Other string
}

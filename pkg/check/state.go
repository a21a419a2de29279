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
	// IPVSDrift counts what the IPVS table and the cluster disagree on
	// (ipvs_guard_ipvs_drift_*).
	IPVSDrift *IPVSDriftState
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
	// Result is the verdict: answered, no-reply, conflict or wrong-responder.
	Result string
	// Responders is the number of distinct MACs that answered.
	Responders int
	// RTTSeconds is the round-trip time of the first reply; 0 when none.
	RTTSeconds float64
	// Service is the IP's Service (namespace/name), empty when unknown.
	Service string
}

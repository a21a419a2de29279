// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"net/netip"
	"strconv"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// Severities of a readiness finding.
const (
	// SeverityBlocker: kube-proxy cannot run in nftables mode on this node
	// until it is fixed; the report's status is problem.
	SeverityBlocker = "blocker"
	// SeverityChange: the switch works, but something this cluster relies
	// on changes or goes away; act before the switch.
	SeverityChange = "change"
	// SeverityInfo: worth knowing, nothing to do.
	SeverityInfo = "info"
	// SeverityOK: what the report proved (the kernel's version, each
	// nf_tables expression the kernel accepted); publishes no metric.
	SeverityOK = "ok"
)

// Readiness finding kinds, stable (JSON "kind", the metrics' kind label).
const (
	// KindKernelVersion: the kernel is older than 5.13 (or its release was not read).
	KindKernelVersion = "kernel-version"
	// KindNFTExpression: an nf_tables expression kube-proxy uses, proved by the probe or the module index.
	KindNFTExpression = "nft-expression"
	// KindModuleBlocked: modprobe.d blacklists an nf_tables module or replaces it with an install command.
	KindModuleBlocked = "module-blocked"
	// KindModulesDisabled: kernel.modules_disabled stops the kernel from loading a needed module.
	KindModulesDisabled = "modules-disabled"
	// KindKubeProxyVersion: kube-proxy's (or RKE2's) release and its nftables mode.
	KindKubeProxyVersion = "kube-proxy-version"
	// KindScheduler: an IPVS scheduler other than rr (nftables picks endpoints at random).
	KindScheduler = "scheduler"
	// KindIPVSTimeouts: IPVS tcpTimeout, tcpFinTimeout or udpTimeout, which nftables mode lacks.
	KindIPVSTimeouts = "ipvs-timeouts"
	// KindExcludeCIDRs: ipvs.excludeCIDRs, which nftables mode lacks.
	KindExcludeCIDRs = "exclude-cidrs"
	// KindStrictARP: ipvs.strictARP, meaningless in nftables mode.
	KindStrictARP = "strict-arp"
	// KindForeignVirtualServer: a virtual server of no Service, deleted by kube-proxy at the switch
	// where its image has modprobe (kubeadm), kept where it has not (RKE2).
	KindForeignVirtualServer = "foreign-virtual-server"
	// KindSwitchCleanup: what kube-proxy's IPVS cleanup removes at the switch on this node
	// (kubeadm: virtual servers, kube-ipvs0, chains, ipsets) or leaves (RKE2: everything).
	KindSwitchCleanup = "switch-cleanup"
	// KindModeSettings: syncPeriod, minSyncPeriod or masqueradeAll, which kube-proxy reads
	// from the active mode's section only, set for IPVS mode and not for nftables mode.
	KindModeSettings = "mode-settings"
	// KindNodePortAddress: connections to a NodePort on an address that is not primary.
	KindNodePortAddress = "nodeport-address"
	// KindServiceIPNotLocal: Service IPs on kube-ipvs0, which stop being local addresses.
	KindServiceIPNotLocal = "service-ip-not-local"
	// KindNodeLocalDNS: NodeLocal DNSCache in its IPVS layout.
	KindNodeLocalDNS = "nodelocaldns"
	// KindCalico: a Calico node agent, to restart after the switch.
	KindCalico = "calico"
)

// Reasons of the nftables-readiness check.
const (
	// ReasonReadyForNftables: no blocker (changes and info may remain).
	ReasonReadyForNftables = "ReadyForNftables"
	// ReasonNotReadyForNftables: at least one blocker.
	ReasonNotReadyForNftables = "NotReadyForNftables"
)

// Finding is one observation of the nftables-readiness report.
type Finding struct {
	// Kind is one of the Kind* constants.
	Kind string `json:"kind"`
	// Severity is blocker, change, info, or ok (what passed).
	Severity string `json:"severity"`
	// Object names what the finding is about (a module, a virtual server
	// "TCP 10.96.99.99:80", an interface, a setting).
	Object string `json:"object,omitempty"`
	// Message says what was seen and what it means, naming Object.
	Message string `json:"message"`
}

// String renders the finding as one report line.
func (f Finding) String() string { return f.Severity + " " + f.Kind + ": " + f.Message }

// State publishes the finding's kind and severity.
func (f Finding) State() check.State {
	if f.Severity == SeverityOK {
		return check.State{}
	}
	return check.State{Readiness: &check.ReadinessState{Kind: f.Kind, Severity: f.Severity}}
}

// VirtualServerName names a virtual server as ipvsadm lists it: "TCP
// 10.96.99.99:80", "UDP [fd00::a]:53", "FWM 7".
func VirtualServerName(k ipvs.Key) string {
	if k.FWMark != 0 {
		return "FWM " + strconv.FormatUint(uint64(k.FWMark), 10)
	}
	return k.Protocol.String() + " " + netip.AddrPortFrom(k.Address, k.Port).String()
}

// ipvsadmFlag is ipvsadm's option for a virtual server of k's protocol.
func ipvsadmService(k ipvs.Key) string {
	if k.FWMark != 0 {
		return "-f " + strconv.FormatUint(uint64(k.FWMark), 10)
	}
	flag := "-t"
	switch k.Protocol.String() {
	case "UDP":
		flag = "-u"
	case "SCTP":
		flag = "--sctp-service"
	}
	return flag + " " + netip.AddrPortFrom(k.Address, k.Port).String()
}

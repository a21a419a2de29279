// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// TableName is kube-proxy's nftables table (pkg/proxy/nftables/proxier.go).
const TableName = "kube-proxy"

// Objects of kube-proxy 1.37.1's table the comparison needs.
const (
	ChainServices    = "services"
	MapServiceIPs    = "service-ips"
	MapNodePorts     = "service-nodeports"
	MapNoEndpoint    = "no-endpoint-services"
	prefixService    = "service-"
	prefixLocal      = "local-"
	prefixExternal   = "external-"
	prefixEndpoint   = "endpoint-"
	anonymousMapName = "__map"
)

// BaseChains are the chains kube-proxy 1.37.1 hooks into netfilter.
var BaseChains = []string{
	"filter-prerouting-pre-dnat", "filter-output-pre-dnat", "filter-input", "filter-forward",
	"filter-output", "nat-prerouting", "nat-output", "nat-postrouting",
}

// VerdictMaps are the maps kube-proxy dispatches Service traffic through.
var VerdictMaps = []string{MapServiceIPs, MapNodePorts, MapNoEndpoint}

// ServiceKey is one service-ips (or no-endpoint-services) element's key.
type ServiceKey struct {
	IP       netip.Addr
	Protocol string // tcp, udp, sctp
	Port     uint16
}

func (k ServiceKey) String() string {
	return fmt.Sprintf("%s . %s . %d", k.IP, k.Protocol, k.Port)
}

// PortKey is one service-nodeports element's key.
type PortKey struct {
	Protocol string
	Port     uint16
}

// Table is what ipvs-guard reads of one family's kube-proxy table.
type Table struct {
	// Family is ip or ip6.
	Family string
	// Present is false when the table does not exist.
	Present bool
	// Chains are the table's chain names.
	Chains map[string]bool
	// Maps are the table's named sets and maps.
	Maps map[string]bool
	// ServiceIPs maps each service-ips element to its verdict's chain.
	ServiceIPs map[ServiceKey]string
	// NodePorts maps each service-nodeports element to its verdict's chain.
	NodePorts map[PortKey]string
	// NoEndpoint maps each no-endpoint-services element to its verdict
	// ("drop", "goto reject-chain", …).
	NoEndpoint map[ServiceKey]string
	// DNAT maps each service-, local- and external- chain to the endpoints
	// its rules DNAT to: the numgen map of 1.37.1, or the endpoint- chains
	// of older releases.
	DNAT map[string][]netip.AddrPort
	// Rules counts the rules of each service-, local- and external- chain
	// (0: flushed, as kube-proxy leaves a stale chain until its next sync
	// deletes it).
	Rules map[string]int
}

// protoName names an IP protocol number as nft does.
func protoName(p byte) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", p)
}

// ProtoNumber is the IP protocol number of a Service protocol name (tcp, udp, sctp).
func ProtoNumber(name string) byte {
	switch strings.ToLower(name) {
	case "tcp":
		return 6
	case "udp":
		return 17
	case "sctp":
		return 132
	}
	return 0
}

// decodeServiceKey decodes an "ipv4_addr . inet_proto . inet_service" (or
// ipv6_addr) concatenation: each field padded to 4 bytes.
func decodeServiceKey(b []byte, v6 bool) (ServiceKey, bool) {
	n := 4
	if v6 {
		n = 16
	}
	if len(b) < n+8 {
		return ServiceKey{}, false
	}
	ip, ok := netip.AddrFromSlice(b[:n])
	if !ok {
		return ServiceKey{}, false
	}
	return ServiceKey{IP: ip, Protocol: protoName(b[n]), Port: binary.BigEndian.Uint16(b[n+4 : n+6])}, true
}

// decodePortKey decodes an "inet_proto . inet_service" concatenation.
func decodePortKey(b []byte) (PortKey, bool) {
	if len(b) < 8 {
		return PortKey{}, false
	}
	return PortKey{Protocol: protoName(b[0]), Port: binary.BigEndian.Uint16(b[4:6])}, true
}

// decodeAddrPort decodes an "ipv4_addr . inet_service" map value.
func decodeAddrPort(b []byte, v6 bool) (netip.AddrPort, bool) {
	n := 4
	if v6 {
		n = 16
	}
	if len(b) < n+2 {
		return netip.AddrPort{}, false
	}
	ip, ok := netip.AddrFromSlice(b[:n])
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[n:n+2])), true
}

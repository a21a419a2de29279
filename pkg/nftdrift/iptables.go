// SPDX-License-Identifier: Apache-2.0

package nftdrift

import (
	"bytes"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
)

// KindIPTablesChainMissing: in iptables mode, a chain kube-proxy's iptables
// proxier keeps is missing from the nf_tables backend's tables. A problem.
const KindIPTablesChainMissing = "iptables-chain-missing"

// Chains of kube-proxy 1.37.1's iptables proxier (pkg/proxy/iptables/proxier.go).
const (
	ChainKubeServices = "KUBE-SERVICES"
	ChainCanary       = "KUBE-PROXY-CANARY"
)

// IPTablesChains are the chains that must exist per iptables table: the
// canary ipt.Monitor keeps in mangle, nat and filter, and KUBE-SERVICES, the
// entry of every Service's rules, in nat.
var IPTablesChains = []struct{ Table, Chain string }{
	{"nat", ChainKubeServices}, {"mangle", ChainCanary}, {"nat", ChainCanary}, {"filter", ChainCanary},
}

// IPTablesFamily is what ipvs-guard reads of one family's iptables tables
// (iptables-nft's nf_tables tables of family ip or ip6).
type IPTablesFamily struct {
	// Family is ip or ip6.
	Family string
	// Chains are each present table's chain names (absent table: no key).
	Chains map[string]map[string]bool
}

// LegacyIPTablesPaths list the x_tables (iptables-legacy) tables of the
// network namespace, IPv4 and IPv6.
var LegacyIPTablesPaths = []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"}

// LegacyIPTablesInUse reports whether iptables-legacy holds a nat or filter
// table in this network namespace: kube-proxy's chains are then in
// x_tables, which netlink's nf_tables does not read.
func LegacyIPTablesInUse() bool {
	for _, p := range LegacyIPTablesPaths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range bytes.Fields(b) {
			if s := string(l); s == "nat" || s == "filter" {
				return true
			}
		}
	}
	return false
}

// CompareIPTables returns kube-proxy's iptables chains missing from the
// nf_tables backend, the most telling first (KUBE-SERVICES), family by
// family: the ip family always, ip6 when a Service has an IPv6
// ClusterIP (kube-proxy runs one proxier per family the cluster has).
func CompareIPTables(fams []IPTablesFamily, svcs []*corev1.Service) []Finding {
	var out []Finding
	for _, f := range fams {
		if f.Family != "ip" && !hasFamily(svcs, false) {
			continue
		}
		for _, c := range IPTablesChains {
			if !f.Chains[c.Table][c.Chain] {
				out = append(out, Finding{Kind: KindIPTablesChainMissing, Family: f.Family, Chain: c.Chain, Element: c.Table, Problem: true})
			}
		}
	}
	return out // in IPTablesChains' order, KUBE-SERVICES first
}

func iptablesChainMissing(f Finding) string {
	cmd := "iptables"
	if f.Family == "ip6" {
		cmd = "ip6tables"
	}
	return fmt.Sprintf("%s chain %s is missing from table %s (nf_tables backend) while kube-proxy runs in iptables mode (a firewall reload or `nft flush ruleset`?)", cmd, f.Chain, f.Element)
}

// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
)

// MACsAnnotation is the Node annotation where each agent publishes its own
// interfaces' MACs, a JSON object interface → MAC, so an ARP responder's MAC
// can be named as a node.
const MACsAnnotation = "ipvs-guard.io/macs"

// DownMACsAnnotation is the Node annotation where each agent publishes the
// MACs of its interfaces that are down (administratively, or up without
// carrier), in the same JSON shape as MACsAnnotation, so a reply carrying
// such a MAC is named as one from a down interface. A separate annotation
// keeps MACsAnnotation's shape for readers that predate it.
const DownMACsAnnotation = "ipvs-guard.io/macs-down"

// HostDownMACs returns the MAC of every non-loopback Ethernet interface that
// is down or has no carrier (kube-ipvs0 left out: it is always down and
// never answers with its MAC). Such interfaces rarely come and go, so the
// annotation rarely changes.
func HostDownMACs() (map[string]string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	return downMACs(ifaces), nil
}

func downMACs(ifaces []net.Interface) map[string]string {
	out := map[string]string{}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback != 0 || len(ifc.HardwareAddr) != 6 || ifc.Name == "kube-ipvs0" {
			continue
		}
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagRunning == 0 {
			out[ifc.Name] = ifc.HardwareAddr.String()
		}
	}
	return out
}

// HostMACs returns the MAC of every up, non-loopback interface that carries
// a global IPv4 or IPv6 address (those are the ones that answer ARP and
// neighbour solicitations); interfaces without one (link-local only), such as pod veths, are left out so pod churn never rewrites the
// annotation. kube-ipvs0 is left out too: ARP for its addresses is answered
// with the receiving interface's MAC (and NDP for them not at all).
func HostMACs() (map[string]string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	out := map[string]string{}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || len(ifc.HardwareAddr) != 6 || ifc.Name == "kube-ipvs0" {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsGlobalUnicast() {
				out[ifc.Name] = ifc.HardwareAddr.String()
				break
			}
		}
	}
	return out, nil
}

// EncodeMACs renders the annotation value (stable: keys sorted, MACs lower case).
func EncodeMACs(macs map[string]string) string {
	norm := make(map[string]string, len(macs))
	for k, v := range macs {
		norm[k] = strings.ToLower(v)
	}
	b, _ := json.Marshal(norm) // a map[string]string always marshals
	return string(b)
}

// DecodeMACs parses the annotation value; malformed values give an error.
func DecodeMACs(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("decoding %s annotation: %w", MACsAnnotation, err)
	}
	return m, nil
}

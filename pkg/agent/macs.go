// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
)

// MACsAnnotation is the Node annotation where each agent publishes its own
// interfaces' MACs, a JSON object interface → MAC, so an ARP responder's MAC
// can be named as a node.
const MACsAnnotation = "ipvs-guard.io/macs"

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

// maxDecodedMACs bounds macsMemo; past it the memo starts afresh.
const maxDecodedMACs = 4096

// macsMemo remembers what DecodeMACs made of each annotation value it was
// given. Every ARP run shards over every peer and names each responding MAC
// by searching every peer's annotation: decoding them each time was
// thousands of JSON decodes per run with 1,000 nodes. Values are few (one
// per agent, changing with its interfaces) and the results are read-only.
// Safe for concurrent use.
type macsMemo struct {
	mu      sync.Mutex
	decoded map[string]decodedMACs
}

type decodedMACs struct {
	macs map[string]string
	ok   bool // false: malformed
}

// decode returns DecodeMACs(raw) from the memo, ok false for a malformed
// value; has false (no annotation) decodes nothing. The map returned must
// not be modified.
func (m *macsMemo) decode(raw string, has bool) (macs map[string]string, ok bool) {
	if !has {
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, found := m.decoded[raw]; found {
		return d.macs, d.ok
	}
	if m.decoded == nil || len(m.decoded) >= maxDecodedMACs {
		m.decoded = map[string]decodedMACs{}
	}
	macs, err := DecodeMACs(raw)
	d := decodedMACs{macs: macs, ok: err == nil}
	m.decoded[raw] = d
	return d.macs, d.ok
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"encoding/json"

	"github.com/ipvs-guard/ipvs-guard/pkg/arpcheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// moduleState is what the collector reads from a modules finding (DESIGN §8).
type moduleState struct {
	Module    string `json:"module"`
	Loaded    bool   `json:"loaded"`
	Builtin   bool   `json:"builtin"`
	Available bool   `json:"available"`
	Declared  bool   `json:"declared"`
	Stale     bool   `json:"stale"`
}

// arpState is what the collector reads from an ARP finding (DESIGN §8).
type arpState struct {
	IP         string   `json:"ip"`
	Interface  string   `json:"interface"`
	Result     string   `json:"result"`
	MACs       []string `json:"macs"`
	RTTSeconds float64  `json:"rtt_seconds"`
	Service    string   `json:"service,omitempty"`
}

// ipvsState is what the collector reads from kube-proxy and IPVS findings.
type ipvsState struct {
	Mode                             string `json:"mode"`
	VirtualServers                   *int   `json:"virtual_servers"`
	VirtualServersWithoutRealServers *int   `json:"virtual_servers_without_real_servers"`
}

// resultState is the state one check result contributes to the metrics.
type resultState struct {
	modules        []moduleState
	arp            []arpState
	mode           string
	strictARP      *bool
	virtualServers *int
	withoutReal    *int
}

// stateOf extracts the state a check result exposes. The checking packages'
// finding types are read directly; any other finding is read through its JSON
// form, which DESIGN §8 makes a stable contract.
func stateOf(r check.Result) resultState {
	var st resultState
	for _, f := range r.Findings {
		switch f := f.(type) {
		case nil:
			continue
		case modules.Finding:
			st.modules = append(st.modules, fromModule(f))
			continue
		case *modules.Finding:
			if f != nil {
				st.modules = append(st.modules, fromModule(*f))
			}
			continue
		case kubeproxy.Finding:
			st.fromKubeProxy(f)
			continue
		case *kubeproxy.Finding:
			if f != nil {
				st.fromKubeProxy(*f)
			}
			continue
		case arpcheck.Finding:
			if a, ok := fromARP(f); ok {
				st.arp = append(st.arp, a)
			}
			continue
		case *arpcheck.Finding:
			if f != nil {
				if a, ok := fromARP(*f); ok {
					st.arp = append(st.arp, a)
				}
			}
			continue
		}
		raw, err := json.Marshal(f)
		if err != nil {
			continue
		}
		switch r.Name {
		case check.NameModules:
			var m moduleState
			if json.Unmarshal(raw, &m) == nil && m.Module != "" {
				st.modules = append(st.modules, m)
			}
		case check.NameARP:
			var a arpState
			if json.Unmarshal(raw, &a) == nil && a.IP != "" && a.Result != "" {
				st.arp = append(st.arp, a)
			}
		case check.NameKubeProxy, check.NameIPVS:
			var s ipvsState
			if json.Unmarshal(raw, &s) != nil {
				continue
			}
			if s.Mode != "" {
				st.mode = s.Mode
			}
			if s.VirtualServers != nil {
				st.virtualServers = s.VirtualServers
			}
			if s.VirtualServersWithoutRealServers != nil {
				st.withoutReal = s.VirtualServersWithoutRealServers
			}
		}
	}
	return st
}

func fromModule(f modules.Finding) moduleState {
	return moduleState{Module: f.Module, Loaded: f.Loaded, Builtin: f.Builtin, Available: f.Available, Declared: f.Declared, Stale: f.Stale}
}

// fromARP converts an ARP finding; one without a verdict is not exposed.
func fromARP(f arpcheck.Finding) (arpState, bool) {
	if f.IP == "" || f.Result == arpcheck.ResultUnknown {
		return arpState{}, false
	}
	return arpState{IP: f.IP, Interface: f.Interface, Result: f.Result.String(), MACs: f.MACs, RTTSeconds: f.RTTSeconds, Service: f.Service}, true
}

func (st *resultState) fromKubeProxy(f kubeproxy.Finding) {
	if f.Mode != "" {
		st.mode = f.Mode
	}
	if f.StrictARP != nil {
		v := *f.StrictARP
		st.strictARP = &v
	}
}

// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"reflect"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// nodeState is the state the collector exposes, merged from every finding of
// every result: one entry per module and per probed IP, so a module or IP
// reported twice yields one series set (the last finding wins) rather than a
// duplicate series, which would fail the whole scrape. The single-valued
// states follow the same rule.
type nodeState struct {
	modules        map[string]check.ModuleState
	arp            map[[2]string]check.ARPState
	mode           string
	strictARP      *bool
	virtualServers *int
	withoutReal    *int
	drift          *check.IPVSDriftState
}

// stateOf merges the typed state the findings of results publish
// ([check.Finding.State]).
func stateOf(results ...check.Result) nodeState {
	st := nodeState{modules: map[string]check.ModuleState{}, arp: map[[2]string]check.ARPState{}}
	for _, r := range results {
		for _, f := range r.Findings {
			st.add(findingState(f))
		}
	}
	return st
}

// add merges one finding's state.
func (st *nodeState) add(s check.State) {
	if m := s.Module; m != nil && m.Module != "" {
		st.modules[m.Module] = *m
	}
	if a := s.ARP; a != nil && a.IP != "" && a.Result != "" {
		st.arp[[2]string{a.IP, a.Interface}] = *a
	}
	if kp := s.KubeProxy; kp != nil {
		if kp.Mode != "" {
			st.mode = kp.Mode
		}
		if kp.StrictARP != nil {
			v := *kp.StrictARP
			st.strictARP = &v
		}
	}
	if t := s.IPVSTable; t != nil {
		v := t.VirtualServers
		st.virtualServers = &v
		if t.WithoutRealServers != nil {
			w := *t.WithoutRealServers
			st.withoutReal = &w
		}
	}
	if d := s.IPVSDrift; d != nil {
		st.drift = d
	}
}

// findingState returns f's state; a nil finding (interface or pointer)
// publishes nothing.
func findingState(f check.Finding) check.State {
	if f == nil {
		return check.State{}
	}
	if v := reflect.ValueOf(f); v.Kind() == reflect.Pointer && v.IsNil() {
		return check.State{}
	}
	return f.State()
}

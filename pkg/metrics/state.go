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
	conflicts      map[check.LBIPConflictState]bool
	notPreferred   map[check.ARPPreferenceState]bool
	mode           string
	strictARP      *bool
	virtualServers *int
	withoutReal    *int
	// The data plane's freshness and the advisories (docs/design.md §3b).
	kpSync     map[string]check.KubeProxySyncState
	advisories map[[2]string]check.AdvisoryState
	sysctls    map[string]float64
	conntrack  *check.ConntrackState
	readiness  map[[2]string]int // kind, severity → findings
	leftovers  map[string]int    // kind → leftovers
	drift      *check.IPVSDriftState
}

// stateOf merges the typed state the findings of results publish
// ([check.Finding.State]).
func stateOf(results ...check.Result) nodeState {
	st := nodeState{modules: map[string]check.ModuleState{}, arp: map[[2]string]check.ARPState{},
		kpSync: map[string]check.KubeProxySyncState{}, advisories: map[[2]string]check.AdvisoryState{}, sysctls: map[string]float64{},
		readiness: map[[2]string]int{}, leftovers: map[string]int{}, conflicts: map[check.LBIPConflictState]bool{},
		notPreferred: map[check.ARPPreferenceState]bool{}}
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
	if c := s.LBIPConflict; c != nil && c.IP != "" {
		st.conflicts[*c] = true
	}
	if p := s.ARPPreference; p != nil && p.IP != "" {
		st.notPreferred[*p] = true
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
	st.addDataPlane(s)
	if r := s.Readiness; r != nil && r.Kind != "" {
		st.readiness[[2]string{r.Kind, r.Severity}]++
	}
	if l := s.Leftover; l != nil && l.Kind != "" {
		st.leftovers[l.Kind]++
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

// addDataPlane merges kube-proxy's sync freshness, the advisories, the
// sysctl values and the conntrack table's use.
func (st *nodeState) addDataPlane(s check.State) {
	if k := s.KubeProxySync; k != nil && k.IPFamily != "" {
		st.kpSync[k.IPFamily] = *k
	}
	if a := s.Advisory; a != nil && a.Advisory != "" {
		st.advisories[[2]string{a.Check, a.Advisory}] = *a
	}
	if v := s.Sysctl; v != nil && v.Name != "" {
		st.sysctls[v.Name] = v.Value
	}
	if c := s.Conntrack; c != nil {
		v := *c
		st.conntrack = &v
	}
}

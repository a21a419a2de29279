// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestDecideIPVSUse: configured × running × reachable.
func TestDecideIPVSUse(t *testing.T) {
	const addr = "127.0.0.1:10249"
	unreachable := fmt.Errorf("GET http://%s/proxyMode: %w", addr, ErrUnreachable)
	noConfigz := errors.New("GET /configz: HTTP 404")
	tests := []struct {
		name        string
		running     string
		runErr      error
		configured  string
		cfgErr      error
		wantApplies bool
		wantMsg     string // substring; "" wants an empty message
	}{
		{"unreachable", "", unreachable, "", nil, true, "kube-proxy not reachable at " + addr + ": assuming IPVS mode"},
		{"ipvs as configured", ModeIPVS, nil, ModeIPVS, nil, true, ""},
		{"ipvs, configz unreadable", ModeIPVS, nil, "", noConfigz, true, ""},
		{"ipvs configured, fell back to iptables", ModeIPTables, nil, ModeIPVS, nil, true, ""},
		{"ipvs configured, runs nftables", ModeNFTables, nil, ModeIPVS, nil, true, ""},
		{"nftables as configured", ModeNFTables, nil, ModeNFTables, nil, false, "kube-proxy runs in nftables mode, as configured: the IPVS prerequisites do not apply"},
		{"iptables as configured", ModeIPTables, nil, ModeIPTables, nil, false, "kube-proxy runs in iptables mode, as configured"},
		{"nftables configured, runs iptables", ModeIPTables, nil, ModeNFTables, nil, false, "configured for nftables mode and runs in iptables mode"},
		{"nftables, configz unreadable", ModeNFTables, nil, "", noConfigz, true, "runs in nftables mode but its /configz is not readable: assuming it is configured for IPVS mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := DecideIPVSUse(addr, tt.running, tt.runErr, tt.configured, tt.cfgErr)
			if u.Applies != tt.wantApplies {
				t.Errorf("Applies = %t, want %t (%+v)", u.Applies, tt.wantApplies, u)
			}
			if tt.wantMsg == "" && u.Message != "" || !strings.Contains(u.Message, tt.wantMsg) {
				t.Errorf("Message = %q, want %q", u.Message, tt.wantMsg)
			}
			if tt.runErr == nil && u.Mode != tt.running {
				t.Errorf("Mode = %q, want %q", u.Mode, tt.running)
			}
			if !u.Applies {
				r := u.NotInUse(check.NameModules)
				if r.Status != check.StatusSkipped || r.Reason != check.ReasonIPVSNotInUse || r.Message != u.Message {
					t.Errorf("NotInUse = %+v", r)
				}
			}
		})
	}
}

// TestUseResolver reads a real HTTP server: one pair of requests per TTL,
// a mode switch seen once the TTL passed, an unreachable port assumed IPVS.
func TestUseResolver(t *testing.T) {
	var mode atomic.Value
	mode.Store(ModeNFTables)
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		m := mode.Load().(string)
		switch r.URL.Path {
		case "/proxyMode":
			fmt.Fprint(w, m)
		case "/configz":
			fmt.Fprintf(w, `{"kubeproxy.config.k8s.io":{"mode":%q}}`, m)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	now := time.Unix(1000, 0)
	r := NewUseResolver(NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second), time.Minute)
	r.now = func() time.Time { return now }
	ctx := context.Background()

	if u := r.Use(ctx); u.Applies || u.Mode != ModeNFTables {
		t.Fatalf("nftables: %+v", u)
	}
	r.Use(ctx)
	if n := requests.Load(); n != 2 {
		t.Errorf("two uses within the TTL made %d requests, want 2", n)
	}
	mode.Store(ModeIPVS)
	if u := r.Use(ctx); u.Applies {
		t.Errorf("within the TTL: %+v, want the cached answer", u)
	}
	now = now.Add(time.Minute)
	if u := r.Use(ctx); !u.Applies || u.Mode != ModeIPVS || u.Message != "" {
		t.Errorf("switched back to ipvs: %+v", u)
	}

	// Back to nftables, then kube-proxy goes away (a restart): the last
	// mode it reported holds, and the message says so.
	mode.Store(ModeNFTables)
	now = now.Add(time.Minute)
	if u := r.Use(ctx); u.Applies || u.Assumed {
		t.Fatalf("nftables again: %+v", u)
	}
	srv.Close()
	now = now.Add(time.Minute)
	if u := r.Use(ctx); u.Applies || !u.Assumed || u.Mode != ModeNFTables || !strings.Contains(u.Message, "assuming nftables mode, as it last reported") {
		t.Errorf("gone after nftables: %+v", u)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// Never reached and nothing else tells: the mode is unknown.
	u := NewUseResolver(NewClient(addr, time.Second), 0).Use(ctx)
	if !u.Applies || !u.Assumed || !u.Unknown || !strings.HasPrefix(u.Message, "kube-proxy's mode is not known yet: kube-proxy not reachable at "+addr) {
		t.Errorf("never reached: %+v", u)
	}
	// The operator's word.
	u = NewUseResolver(NewClient(addr, time.Second), 0).WithAssumedMode(ModeIPVS).Use(ctx)
	if !u.Applies || !u.Assumed || u.Unknown || u.Message != "kube-proxy not reachable at "+addr+": assuming it is configured for ipvs mode (--assume-proxy-mode)" {
		t.Errorf("never reached, --assume-proxy-mode ipvs: %+v", u)
	}
}

// TestUseResolverFallback: kube-proxy silent, the sources in order of
// precedence decide; kube-proxy's last report of IPVS is no licence to
// load, and a configuration saying nftables beats the operator's word.
func TestUseResolverFallback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	src := func(name, mode string, err error) ModeSource {
		return ModeSource{Name: name, Read: func(context.Context) (Evidence, error) { return Evidence{Mode: mode, Detail: "d"}, err }}
	}
	for _, tc := range []struct {
		name             string
		sources          []ModeSource
		assumed          string
		applies, unknown bool
		mode, message    string
	}{
		{"node config nftables", []ModeSource{src(SourceNodeConfig, ModeNFTables, nil), src(SourceKernel, ModeIPVS, nil)}, ModeIPVS, false, false, ModeNFTables,
			"kube-proxy not reachable at " + addr + ": configured for nftables mode (node configuration: d): the IPVS prerequisites do not apply"},
		{"node config ipvs", []ModeSource{src(SourceNodeConfig, ModeIPVS, nil)}, "", true, false, "",
			"kube-proxy not reachable at " + addr + ": configured for ipvs mode (node configuration: d)"},
		{"unreadable config, kernel nftables", []ModeSource{src(SourceNodeConfig, "", errors.New("bad yaml")), src(SourceKernel, ModeNFTables, nil)}, "", false, false, ModeNFTables,
			"kube-proxy not reachable at " + addr + ": configured for nftables mode (kernel state: d): the IPVS prerequisites do not apply"},
		{"nothing tells", []ModeSource{src(SourceNodeConfig, "", errors.New("bad yaml")), src(SourceKernel, "", nil)}, "", true, true, "",
			"kube-proxy's mode is not known yet: kube-proxy not reachable at " + addr + "; node configuration: bad yaml; kernel state: d: nothing is loaded or declared until it is"},
		{"nothing tells, operator says iptables", []ModeSource{src(SourceKernel, "", nil)}, ModeIPTables, false, false, ModeIPTables,
			"kube-proxy not reachable at " + addr + ": assuming it is configured for iptables mode (--assume-proxy-mode): the IPVS prerequisites do not apply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := NewUseResolver(NewClient(addr, time.Second), 0, tc.sources...).WithAssumedMode(tc.assumed).Use(context.Background())
			if u.Applies != tc.applies || u.Unknown != tc.unknown || u.Mode != tc.mode || !u.Assumed || u.Message != tc.message {
				t.Errorf("got %+v\nwant applies %v unknown %v mode %q message %q", u, tc.applies, tc.unknown, tc.mode, tc.message)
			}
		})
	}

	// kube-proxy reported IPVS, then went away, nothing else tells: unknown.
	var up atomic.Bool
	up.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, ModeIPVS)
	}))
	defer srv.Close()
	now := time.Unix(1000, 0)
	r := NewUseResolver(NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second), time.Second)
	r.now = func() time.Time { return now }
	if u := r.Use(context.Background()); !u.Applies || u.Assumed || u.Unknown {
		t.Fatalf("ipvs: %+v", u)
	}
	up.Store(false)
	now = now.Add(time.Minute)
	if u := r.Use(context.Background()); !u.Unknown || !strings.Contains(u.Message, "kube-proxy's last report: it reported ipvs mode, which is no proof of its mode now") {
		t.Errorf("gone after ipvs: %+v", u)
	}
}

// TestLastMode: the mode kube-proxy last reported stands while it does not
// answer, and goes when its port refuses connections.
func TestLastMode(t *testing.T) {
	var answer string
	var fail error
	m := &LastMode{Read: func(context.Context) (string, error) { return answer, fail }}
	steps := []struct {
		answer  string
		fail    error
		want    string
		wantErr error
	}{
		{fail: ErrNotAnswering, wantErr: ErrNotAnswering}, // nothing reported yet
		{answer: ModeNFTables, want: ModeNFTables},
		{fail: ErrNotAnswering, want: ModeNFTables},
		{fail: ErrUnreachable, wantErr: ErrUnreachable},
		{fail: ErrNotAnswering, wantErr: ErrNotAnswering}, // forgotten
		{answer: ModeIPVS, want: ModeIPVS},
	}
	for i, s := range steps {
		answer, fail = s.answer, s.fail
		got, err := m.Mode(context.Background())
		if got != s.want || (s.wantErr == nil) != (err == nil) || (s.wantErr != nil && !errors.Is(err, s.wantErr)) {
			t.Errorf("step %d: %q, %v; want %q, %v", i, got, err, s.want, s.wantErr)
		}
	}
}

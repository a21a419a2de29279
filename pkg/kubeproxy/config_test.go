// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfigz(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		body    string
		want    Config
		wantErr error
	}{
		{
			name: "1.37.1 v1alpha1 lc (real capture)",
			file: "testdata/configz-ipvs-lc.json",
			want: Config{Mode: "ipvs", IPVS: IPVSConfig{Scheduler: "lc", StrictARP: true, SyncPeriod: Duration(30 * time.Second)}, HostnameOverride: "vm-node-1", MetricsBindAddress: "127.0.0.1:10249", HealthzBindAddress: "0.0.0.0:10256"},
		},
		{
			name: "1.37.1 v1alpha1 rr (real capture)",
			file: "testdata/configz-ipvs-rr.json",
			want: Config{Mode: "ipvs", IPVS: IPVSConfig{Scheduler: "rr", StrictARP: true, SyncPeriod: Duration(30 * time.Second)}, HostnameOverride: "vm-node-1", MetricsBindAddress: "127.0.0.1:10249", HealthzBindAddress: "0.0.0.0:10256"},
		},
		{
			name: "1.30 internal struct with Go field names",
			file: "testdata/configz-1.30-internal.json",
			want: Config{Mode: "ipvs", IPVS: IPVSConfig{Scheduler: "wrr", StrictARP: false, SyncPeriod: Duration(30 * time.Second)}, IPTables: ProxierConfig{SyncPeriod: Duration(30 * time.Second)}, HostnameOverride: "rke2-node-1", ClusterCIDR: "10.42.0.0/16", MetricsBindAddress: "127.0.0.1:10249", HealthzBindAddress: "0.0.0.0:10256"},
		},
		{
			name: "iptables mode",
			file: "testdata/configz-iptables.json",
			want: Config{Mode: "iptables", IPVS: IPVSConfig{Scheduler: "rr", StrictARP: true, SyncPeriod: Duration(30 * time.Second)}, HostnameOverride: "vm-node-1", MetricsBindAddress: "127.0.0.1:10249", HealthzBindAddress: "0.0.0.0:10256"},
		},
		{name: "other component's configz", body: `{"kubeletconfig":{}}`, wantErr: ErrNoConfig},
		{name: "null config", body: `{"kubeproxy.config.k8s.io":null}`, wantErr: ErrNoConfig},
		{name: "not json", body: `404 page not found`},
		{name: "wrong type", body: `{"kubeproxy.config.k8s.io":{"ipvs":{"strictARP":"yes"}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			if tc.file != "" {
				var err error
				if body, err = os.ReadFile(tc.file); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ParseConfigz(body)
			wantFail := tc.wantErr != nil || (tc.file == "" && tc.want.Mode == "")
			if wantFail {
				if err == nil {
					t.Fatalf("want an error, got %+v", got)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestEffectiveDefaults(t *testing.T) {
	var c Config
	if c.EffectiveMode() != ModeIPTables || c.EffectiveScheduler() != "rr" {
		t.Errorf("defaults = %q %q", c.EffectiveMode(), c.EffectiveScheduler())
	}
}

func TestParseConfigFile(t *testing.T) {
	b, err := os.ReadFile("testdata/kube-proxy-configmap-config.conf")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfigFile(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Mode: "ipvs", IPVS: IPVSConfig{Scheduler: "sh", StrictARP: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if _, err := ParseConfigFile([]byte("ipvs: [")); err == nil {
		t.Error("want an error for broken YAML")
	}
}

func FuzzParseConfigz(f *testing.F) {
	for _, p := range []string{"testdata/configz-ipvs-lc.json", "testdata/configz-ipvs-rr.json", "testdata/configz-1.30-internal.json", "testdata/configz-iptables.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"kubeproxy.config.k8s.io":{"Mode":"ipvs","mode":"iptables"}}`))
	f.Add([]byte(`{"kubeproxy.config.k8s.io":null}`))
	f.Add([]byte(`{"kubeproxy.config.k8s.io":{"mode":"ipvs","ipvs":{"tcpTimeout":"15m","udpTimeout":30000000000,"tcpFinTimeout":{}}}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfigz(b)
		if err != nil {
			if !cmp.Equal(c, Config{}) {
				t.Fatalf("error %v with a non-zero config %+v", err, c)
			}
			return
		}
		// Whatever parsed must have been valid JSON.
		if !json.Valid(b) {
			t.Fatalf("parsed %+v from invalid JSON", c)
		}
		_ = c.EffectiveMode()
		_ = c.EffectiveScheduler()
	})
}

// TestIPVSTimeouts: the IPVS timeouts decode from the v1alpha1 strings and
// from the internal struct's nanoseconds; anything else is zero, never an
// error that would lose the mode and scheduler.
func TestIPVSTimeouts(t *testing.T) {
	tests := []struct {
		name string
		body string
		want [3]time.Duration // tcp, tcpFin, udp
	}{
		{name: "v1alpha1 strings", body: `{"kubeproxy.config.k8s.io":{"mode":"ipvs","ipvs":{"tcpTimeout":"900s","tcpFinTimeout":"2m","udpTimeout":"0s"}}}`, want: [3]time.Duration{900 * time.Second, 2 * time.Minute, 0}},
		{name: "internal nanoseconds", body: `{"kubeproxy.config.k8s.io":{"Mode":"ipvs","IPVS":{"TCPTimeout":30000000000,"UDPTimeout":5000000000}}}`, want: [3]time.Duration{30 * time.Second, 0, 5 * time.Second}},
		{name: "garbage is zero", body: `{"kubeproxy.config.k8s.io":{"mode":"ipvs","ipvs":{"scheduler":"lc","tcpTimeout":"soon","udpTimeout":{"a":1},"tcpFinTimeout":true}}}`},
		{name: "absent", body: `{"kubeproxy.config.k8s.io":{"mode":"ipvs"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfigz([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			got := [3]time.Duration{time.Duration(c.IPVS.TCPTimeout), time.Duration(c.IPVS.TCPFinTimeout), time.Duration(c.IPVS.UDPTimeout)}
			if got != tt.want {
				t.Errorf("timeouts %v, want %v", got, tt.want)
			}
			if c.EffectiveMode() != ModeIPVS {
				t.Errorf("mode %q", c.EffectiveMode())
			}
		})
	}
}

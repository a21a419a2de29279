// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// GroupName is the key kube-proxy's /configz serves its configuration under.
const GroupName = "kubeproxy.config.k8s.io"

// Proxy modes kube-proxy reports.
const (
	ModeIPVS     = "ipvs"
	ModeIPTables = "iptables"
	ModeNFTables = "nftables"
)

// DefaultScheduler is the IPVS scheduler kube-proxy uses when none is set.
const DefaultScheduler = "rr"

// Config is the part of kube-proxy's configuration ipvs-guard needs.
//
// The JSON names are the v1alpha1 ones (camelCase, served by /configz from
// Kubernetes 1.36). Up to 1.35, /configz served the internal struct with Go
// field names ("Mode", "IPVS": {"StrictARP": …}); encoding/json matches keys
// case-insensitively, so the same struct decodes both.
type Config struct {
	// Mode is the configured proxy mode; empty means kube-proxy's default
	// (iptables on Linux).
	Mode string `json:"mode"`
	// IPVS is the IPVS proxier's configuration.
	IPVS IPVSConfig `json:"ipvs"`
	// HostnameOverride is the node name kube-proxy uses, if set.
	HostnameOverride string `json:"hostnameOverride"`
	// ClusterCIDR is the pod CIDR (only in older configurations).
	ClusterCIDR string `json:"clusterCIDR"`
	// MetricsBindAddress is where kube-proxy serves /metrics, /proxyMode and /configz.
	MetricsBindAddress string `json:"metricsBindAddress"`
	// HealthzBindAddress is where kube-proxy serves /healthz and /livez
	// (empty: its default 0.0.0.0:10256).
	HealthzBindAddress string `json:"healthzBindAddress"`
	// SyncPeriod is the internal struct's sync period (up to Kubernetes
	// 1.35's /configz); from 1.36 it is IPVS.SyncPeriod in IPVS mode.
	SyncPeriod Duration `json:"syncPeriod"`
	// IPTables is the iptables section: in IPVS mode kube-proxy reads
	// masqueradeAll from it (pkg/proxy/apis/config/v1alpha1/conversion.go).
	IPTables ModeConfig `json:"iptables"`
	// NFTables is the nftables section: nftables mode reads syncPeriod,
	// minSyncPeriod and masqueradeAll from it, and from nowhere else.
	NFTables ModeConfig `json:"nftables"`

	// InvalidSyncPeriod names a sync period /configz gave that is not a
	// duration ("ipvs.syncPeriod 30"), for HealthTimeoutNote; set by
	// ParseConfigz, never decoded.
	InvalidSyncPeriod string `json:"-"`
}

// ModeConfig is what kube-proxy reads from the section of the mode it runs
// in (v1alpha1): the other sections' values are ignored, so a move to
// another mode resets them to that section's.
type ModeConfig struct {
	// SyncPeriod is the period of full syncs (0: unset).
	SyncPeriod Duration `json:"syncPeriod"`
	// MinSyncPeriod is the shortest time between syncs (0: unset).
	MinSyncPeriod Duration `json:"minSyncPeriod"`
	// MasqueradeAll SNATs all traffic sent through Service IPs.
	MasqueradeAll bool `json:"masqueradeAll"`
}

// IPVSConfig is kube-proxy's IPVS configuration.
type IPVSConfig struct {
	// Scheduler is the IPVS scheduler; empty means DefaultScheduler.
	Scheduler string `json:"scheduler"`
	// StrictARP is kube-proxy's --ipvs-strict-arp: it sets arp_ignore=1 and
	// arp_announce=2 on all interfaces.
	StrictARP bool `json:"strictARP"`
	// ExcludeCIDRs are CIDRs kube-proxy leaves alone when cleaning IPVS rules.
	ExcludeCIDRs []string `json:"excludeCIDRs"`
	// SyncPeriod is the IPVS proxier's --ipvs-sync-period (0: unknown).
	SyncPeriod Duration `json:"syncPeriod"`
	// MinSyncPeriod is the IPVS proxier's --ipvs-min-sync-period (0:
	// unset or unknown).
	MinSyncPeriod Duration `json:"minSyncPeriod"`
	// TCPTimeout is the IPVS TCP session timeout kube-proxy sets (0
	// leaves the kernel's).
	TCPTimeout Duration `json:"tcpTimeout"`
	// TCPFinTimeout is the IPVS timeout of TCP sessions after FIN (0
	// leaves the kernel's).
	TCPFinTimeout Duration `json:"tcpFinTimeout"`
	// UDPTimeout is the IPVS UDP timeout (0 leaves the kernel's).
	UDPTimeout Duration `json:"udpTimeout"`
}

// EffectiveMode returns the mode kube-proxy runs in when configured with
// c.Mode (empty means iptables on Linux), in lower case: kube-proxy takes
// the mode case-insensitively ("IPVS" is ipvs), and says it in lower case.
func (c Config) EffectiveMode() string {
	if m := strings.ToLower(strings.TrimSpace(c.Mode)); m != "" {
		return m
	}
	return ModeIPTables
}

// EffectiveScheduler returns the scheduler kube-proxy's IPVS proxier uses.
func (c Config) EffectiveScheduler() string {
	if c.IPVS.Scheduler == "" {
		return DefaultScheduler
	}
	return c.IPVS.Scheduler
}

// ErrNoConfig means a /configz body holds no kube-proxy configuration.
var ErrNoConfig = errors.New("no " + GroupName + " configuration")

// ParseConfigz parses the body of kube-proxy's /configz.
func ParseConfigz(b []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return Config{}, fmt.Errorf("parsing /configz: %w", err)
	}
	raw, ok := top[GroupName]
	if !ok || len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return Config{}, fmt.Errorf("parsing /configz: %w", ErrNoConfig)
	}
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("parsing /configz %s: %w", GroupName, err)
	}
	// Name a sync period that is there but not a duration (a number where
	// kube-proxy writes "30s"): the health timeout then falls back to the
	// default and says why.
	var periods struct {
		SyncPeriod json.RawMessage `json:"syncPeriod"`
		IPVS       struct {
			SyncPeriod json.RawMessage `json:"syncPeriod"`
		} `json:"ipvs"`
	}
	if json.Unmarshal(raw, &periods) == nil {
		for _, p := range []struct {
			name string
			raw  json.RawMessage
		}{{"ipvs.syncPeriod", periods.IPVS.SyncPeriod}, {"syncPeriod", periods.SyncPeriod}} {
			if len(p.raw) > 0 && string(p.raw) != "null" {
				if _, ok := parseDuration(p.raw); !ok {
					c.InvalidSyncPeriod = p.name + " " + truncateForNote(string(p.raw))
					break
				}
			}
		}
	}
	return c, nil
}

// ParseConfigFile parses a kube-proxy configuration file (the config.conf of
// kubeadm's kube-proxy ConfigMap), YAML or JSON.
func ParseConfigFile(b []byte) (Config, error) {
	var c Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("parsing kube-proxy configuration: %w", err)
	}
	return c, nil
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

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
	// NFTables and IPTables are the other proxiers' configuration (their
	// sync periods; v1alpha1, served by /configz from Kubernetes 1.36).
	NFTables ProxierConfig `json:"nftables"`
	IPTables ProxierConfig `json:"iptables"`
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
}

// ProxierConfig is what ipvs-guard reads of the nftables or iptables
// proxier's configuration.
type ProxierConfig struct {
	// SyncPeriod is the proxier's sync period (0: unknown).
	SyncPeriod Duration `json:"syncPeriod"`
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
// c.Mode (empty means iptables on Linux).
func (c Config) EffectiveMode() string {
	if c.Mode == "" {
		return ModeIPTables
	}
	return c.Mode
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

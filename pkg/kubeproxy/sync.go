// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DefaultHealthzPort is kube-proxy's default healthz port (--healthz-bind-address).
const DefaultHealthzPort = 10256

// DefaultSyncPeriod is kube-proxy's default --ipvs-sync-period (and
// --iptables-sync-period): its proxier re-syncs every rule at least this often.
const DefaultSyncPeriod = 30 * time.Second

// Metric names kube-proxy publishes about its own syncing
// (pkg/proxy/metrics/metrics.go of Kubernetes 1.37).
const (
	metricLastSync       = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	metricLastQueued     = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	metricServicePending = "kubeproxy_sync_proxy_rules_service_changes_pending"
	metricEndpointPend   = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
	// The failures kube-proxy counts but its /healthz ignores: a failed
	// nftables transaction or iptables-restore run, and a failed removal
	// of stale nftables chains (per ip_family).
	metricNFTablesSyncFailures    = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
	metricIPTablesRestoreFailures = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
	metricNFTablesCleanupFailures = "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"
	// metricFullSyncDuration is the histogram of full syncs' durations.
	metricFullSyncDuration = "kubeproxy_sync_full_proxy_rules_duration_seconds"
)

// Duration is a kube-proxy configuration duration as /configz serves it:
// metav1.Duration's JSON, a string such as "30s", in the v1alpha1 and in the
// internal struct alike (testdata/configz-1.30-internal.json). Anything else
// — a bare number such as 30 (seconds? nanoseconds?), a string that is no
// duration, a negative one — is not kube-proxy's and decodes as zero
// (unknown) rather than failing the whole configuration; a reader that
// depends on it says so (Config.HealthTimeoutNote).
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	*d = 0
	if v, ok := parseDuration(b); ok {
		*d = Duration(v)
	}
	return nil
}

// parseDuration decodes a metav1.Duration string; ok is false for anything
// else (a number, a string that is no duration, a negative one).
func parseDuration(b []byte) (time.Duration, bool) {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// HealthTimeout returns how old a queued, unsynced update may get before
// kube-proxy's own /healthz fails, in the mode c configures
// (HealthTimeoutFor(c.EffectiveMode())).
func (c Config) HealthTimeout() time.Duration {
	return c.HealthTimeoutFor(c.EffectiveMode())
}

// HealthTimeoutFor returns kube-proxy's health timeout while it runs in
// mode: twice its sync period (cmd/kube-proxy/app/server.go:
// NewProxyHealthServer(…, 2*config.SyncPeriod)).
func (c Config) HealthTimeoutFor(mode string) time.Duration {
	return 2 * c.SyncPeriodFor(mode)
}

// SyncPeriodFor returns the sync period of kube-proxy's proxier in mode: the
// mode's own section of the v1alpha1 configuration (ipvs.syncPeriod,
// nftables.syncPeriod, iptables.syncPeriod; served from Kubernetes 1.36,
// where the flag --iptables-sync-period feeds both non-IPVS modes), else
// the internal struct's top-level SyncPeriod (up to 1.35), else
// kube-proxy's default of 30s.
func (c Config) SyncPeriodFor(mode string) time.Duration {
	var p time.Duration
	switch mode {
	case ModeIPVS:
		p = time.Duration(c.IPVS.SyncPeriod)
	case ModeNFTables:
		p = time.Duration(c.NFTables.SyncPeriod)
	case ModeIPTables:
		p = time.Duration(c.IPTables.SyncPeriod)
	}
	if p <= 0 {
		p = time.Duration(c.SyncPeriod)
	}
	if p <= 0 {
		p = DefaultSyncPeriod
	}
	return p
}

// HealthTimeoutNote says why HealthTimeout is kube-proxy's default when
// /configz gave a sync period that is not a duration (e.g. the number 30
// where kube-proxy writes "30s"); "" otherwise.
func (c Config) HealthTimeoutNote() string {
	if c.IPVS.SyncPeriod > 0 || c.SyncPeriod > 0 || c.InvalidSyncPeriod == "" {
		return ""
	}
	return fmt.Sprintf("/configz gives %s, not a duration such as \"30s\": kube-proxy's default sync period of %s is assumed", c.InvalidSyncPeriod, DefaultSyncPeriod)
}

// HealthzAddress returns where to reach kube-proxy's /healthz and /livez:
// its healthzBindAddress with kube-proxy's default port 10256 when it names
// none, an unspecified host (0.0.0.0, ::) read as the loopback address of
// its family. Empty means kube-proxy's default, 0.0.0.0:10256. A CIDR (a
// "bind to the node's addresses in this range" form) reads the loopback too.
// The host is not checked: HealthzTarget keeps it on the node.
func (c Config) HealthzAddress() string {
	a := strings.TrimSpace(c.HealthzBindAddress)
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		host, port = strings.Trim(a, "[]"), strconv.Itoa(DefaultHealthzPort)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		port = strconv.Itoa(DefaultHealthzPort)
	}
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified() && ip.To4() != nil):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// HealthzTarget is HealthzAddress kept on this node: kube-proxy serves its
// health on one of the node's own addresses, so a healthzBindAddress naming
// anything else — another host, a name, an address on no local interface
// (isLocal says which are) — is not where kube-proxy answers, and the
// loopback on the same port is read instead; note says so ("" when the
// address is the node's own). A nil isLocal asks the node's interfaces.
func (c Config) HealthzTarget(isLocal func(netip.Addr) bool) (addr, note string) {
	addr = c.HealthzAddress()
	host, port, _ := net.SplitHostPort(addr)
	ip, err := netip.ParseAddr(host)
	if err == nil && ip.Zone() == "" && (ip.IsLoopback() || (isLocal != nil && isLocal(ip.Unmap())) || (isLocal == nil && localAddr(ip.Unmap()))) {
		return addr, ""
	}
	lo := net.JoinHostPort("127.0.0.1", port)
	return lo, fmt.Sprintf("healthzBindAddress %q is no address of this node: its health is read on %s", truncateForNote(c.HealthzBindAddress), lo)
}

// localAddr reports whether a is an address of one of this node's
// interfaces (the agent runs in the host's network namespace).
func localAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

func truncateForNote(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// FamilySync is what kube-proxy's /metrics says about one IP family's proxier.
type FamilySync struct {
	// LastSync is when rules were last synced successfully (zero: never).
	LastSync time.Time
	// LastQueued is when a sync was last queued (a Service or endpoint
	// change seen; zero: never).
	LastQueued time.Time
	// TxFailures is how many of the proxier's rule transactions failed since
	// kube-proxy started: nftables transactions in nftables mode,
	// iptables-restore runs in iptables mode (0 when never, or not counted).
	TxFailures float64
	// CleanupFailures is how many removals of stale nftables chains failed.
	CleanupFailures float64
	// FullSyncs and FullSyncSeconds are the count and the sum of the full
	// syncs' durations since kube-proxy started.
	FullSyncs, FullSyncSeconds float64
}

// Pending reports whether a sync was queued after the last successful one.
func (f FamilySync) Pending() bool { return f.LastQueued.After(f.LastSync) }

// SyncMetrics is what kube-proxy's /metrics says about its own syncing.
type SyncMetrics struct {
	// Families maps kube-proxy's ip_family label (IPv4, IPv6) to its sync state.
	Families map[string]FamilySync
	// ServiceChangesPending and EndpointChangesPending are kube-proxy's
	// pending change gauges (-1 when absent).
	ServiceChangesPending, EndpointChangesPending float64
}

// ErrNoSyncMetrics: /metrics has no kubeproxy_sync_proxy_rules_last_timestamp_seconds.
var ErrNoSyncMetrics = errors.New("no " + metricLastSync + " metric")

// ParseSyncMetrics reads kube-proxy's sync metrics from its /metrics body
// (Prometheus text exposition; the caller bounds its size): only the
// SyncFamilies are parsed (see ReadFamilies).
func ParseSyncMetrics(r io.Reader) (SyncMetrics, error) {
	return ParseSyncMetricsContext(context.Background(), r)
}

// ParseSyncMetricsContext is ParseSyncMetrics, stopping when ctx ends.
func ParseSyncMetricsContext(ctx context.Context, r io.Reader) (SyncMetrics, error) {
	mfs, err := ReadFamilies(ctx, r, SyncFamilies)
	if err != nil {
		return SyncMetrics{}, fmt.Errorf("parsing kube-proxy metrics: %w", err)
	}
	m := SyncMetrics{Families: map[string]FamilySync{}, ServiceChangesPending: -1, EndpointChangesPending: -1}
	perFamily := func(name string, set func(*FamilySync, time.Time)) {
		mf := mfs[name]
		if mf == nil {
			return
		}
		for _, s := range mf.GetMetric() {
			fam := label(s, "ip_family")
			if fam == "" {
				fam = "IPv4"
			}
			fs := m.Families[fam]
			set(&fs, unixTime(value(s)))
			m.Families[fam] = fs
		}
	}
	perFamily(metricLastSync, func(f *FamilySync, t time.Time) { f.LastSync = t })
	perFamily(metricLastQueued, func(f *FamilySync, t time.Time) { f.LastQueued = t })
	if mfs[metricLastSync] == nil {
		return SyncMetrics{}, ErrNoSyncMetrics
	}
	// Counters of a family with no sync metric describe no proxier: they
	// are left out rather than inventing one.
	perCount := func(name string, set func(*FamilySync, *dto.Metric)) {
		for _, s := range mfs[name].GetMetric() {
			fam := label(s, "ip_family")
			if fam == "" {
				fam = "IPv4"
			}
			if fs, ok := m.Families[fam]; ok {
				set(&fs, s)
				m.Families[fam] = fs
			}
		}
	}
	perCount(metricNFTablesSyncFailures, func(f *FamilySync, s *dto.Metric) { f.TxFailures += count(value(s)) })
	perCount(metricIPTablesRestoreFailures, func(f *FamilySync, s *dto.Metric) { f.TxFailures += count(value(s)) })
	perCount(metricNFTablesCleanupFailures, func(f *FamilySync, s *dto.Metric) { f.CleanupFailures += count(value(s)) })
	perCount(metricFullSyncDuration, func(f *FamilySync, s *dto.Metric) {
		if h := s.GetHistogram(); h != nil {
			f.FullSyncs, f.FullSyncSeconds = count(float64(h.GetSampleCount())), count(h.GetSampleSum())
		}
	})
	for name, dst := range map[string]*float64{metricServicePending: &m.ServiceChangesPending, metricEndpointPend: &m.EndpointChangesPending} {
		if mf := mfs[name]; mf != nil && len(mf.GetMetric()) > 0 {
			if v := value(mf.GetMetric()[0]); v >= 0 && !math.IsInf(v, 0) {
				*dst = v
			}
		}
	}
	return m, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return math.NaN()
}

// count returns v as a count: NaN, infinite and negative values are 0.
func count(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0
	}
	return v
}

// unixTime converts a Unix time in seconds; zero, negative, NaN and values
// past year 9999 are the zero time (never).
func unixTime(sec float64) time.Time {
	if math.IsNaN(sec) || sec <= 0 || sec > 253402300799 {
		return time.Time{}
	}
	s, frac := math.Modf(sec)
	return time.Unix(int64(s), int64(frac*1e9)).UTC()
}

// ProxyHealth is kube-proxy's /healthz and /livez answer
// (pkg/proxy/healthcheck/proxy_health.go).
type ProxyHealth struct {
	// Code is the HTTP status: 200 healthy, 503 not.
	Code int `json:"-"`
	// Healthy is kube-proxy's own verdict over every family.
	Healthy bool `json:"healthy"`
	// NodeEligible is false when the Node is being deleted (healthz only).
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Status is the verdict per IP family.
	Status map[string]ProxierHealth `json:"status,omitempty"`
}

// ProxierHealth is kube-proxy's verdict on one IP family's proxier.
type ProxierHealth struct {
	// LastUpdated is when the proxier last synced.
	LastUpdated time.Time `json:"lastUpdated"`
	// Healthy is false when a queued update is older than the health timeout.
	Healthy bool `json:"healthy"`
}

// ParseProxyHealth parses a /healthz or /livez body with its HTTP status.
func ParseProxyHealth(code int, body []byte) (ProxyHealth, error) {
	if code != 200 && code != 503 {
		return ProxyHealth{}, fmt.Errorf("kube-proxy health: HTTP %d: %s", code, strings.TrimSpace(string(firstLine(body))))
	}
	var h ProxyHealth
	if err := json.Unmarshal(body, &h); err != nil {
		return ProxyHealth{}, fmt.Errorf("parsing kube-proxy health: %w", err)
	}
	h.Code = code
	return h, nil
}

// SyncVerdict is the judgement of kube-proxy's sync freshness for one IP family.
type SyncVerdict struct {
	// Family is kube-proxy's ip_family (IPv4, IPv6).
	Family string
	// Sync is what /metrics said.
	Sync FamilySync
	// Stale is true when a queued update has waited longer than the health
	// timeout with no sync since.
	Stale bool
	// By says what decided Stale: "healthz" (kube-proxy's own verdict) or
	// "metrics" (its timestamps, when /healthz did not answer).
	By string
	// NotSynced is how long since the last successful sync.
	NotSynced time.Duration
}

// JudgeSync decides, per IP family, whether kube-proxy's rules are stale,
// as kube-proxy's own /healthz does (ProxyHealthServer.Health): a family is
// unhealthy when the oldest update queued since its last sync is at least
// timeout old. When health (from /livez, which carries no node-eligibility
// verdict) answered with the family's status, that is kube-proxy's own
// verdict and is taken as is. Otherwise the metrics decide: they carry the
// last queued time, not the oldest pending one, which lies between the last
// sync and the last queue; kube-proxy's periodic resync runs every half
// timeout, so a pending update with no sync for a whole timeout is stale.
func JudgeSync(now time.Time, timeout time.Duration, m SyncMetrics, health *ProxyHealth) []SyncVerdict {
	fams := make([]string, 0, len(m.Families))
	for f := range m.Families {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	out := make([]SyncVerdict, 0, len(fams))
	for _, f := range fams {
		fs := m.Families[f]
		v := SyncVerdict{Family: f, Sync: fs}
		if !fs.LastSync.IsZero() && now.After(fs.LastSync) {
			v.NotSynced = now.Sub(fs.LastSync)
		}
		if ph, ok := healthOf(health, f); ok {
			v.By = "healthz"
			v.Stale = !ph.Healthy
		} else {
			v.By = "metrics"
			v.Stale = fs.Pending() && !fs.LastSync.IsZero() && v.NotSynced >= timeout
		}
		out = append(out, v)
	}
	return out
}

func healthOf(h *ProxyHealth, family string) (ProxierHealth, bool) {
	if h == nil || h.Status == nil {
		return ProxierHealth{}, false
	}
	ph, ok := h.Status[family]
	return ph, ok
}

// parseText parses a Prometheus text exposition. expfmt's parser panics on
// some malformed input (a nil dereference for "#TYPE A \n{}0", found by
// FuzzParseSyncMetrics): a body kube-proxy's port serves is outside input,
// so such a panic is an error, never the agent's crash.
func parseText(r io.Reader) (mfs map[string]*dto.MetricFamily, err error) {
	defer func() {
		if p := recover(); p != nil {
			mfs, err = nil, fmt.Errorf("malformed metrics text (the parser failed: %v)", p)
		}
	}()
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(r)
}

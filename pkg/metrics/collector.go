// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/version"
)

const namespace = "ipvs_guard"

// ARP probe results, as in the arp check's findings (docs/design.md §8).
var arpResults = []string{"answered", "no-reply", "conflict", "wrong-responder", "reply-from-other-interface", "reply-from-down-interface"}

// Check statuses, in the order they are exposed.
var checkStatuses = []check.Status{check.StatusOK, check.StatusProblem, check.StatusError, check.StatusSkipped}

// Condition statuses, as on a Node.
var conditionStatuses = []string{"True", "False", "Unknown"}

// Condition is the status of one Node condition ipvs-guard owns, as last
// computed by the agent (True means a problem).
type Condition struct {
	// Type is the condition type, e.g. IPVSModulesMissing.
	Type string
	// Status is True, False or Unknown.
	Status string
	// Reason is the condition's UpperCamelCase reason.
	Reason string
}

// CheckRuns is the reconcile loop's record of one check.
type CheckRuns struct {
	// Name is the check's name.
	Name string
	// Runs counts finished runs; Errors those that ended in an infrastructure error.
	Runs, Errors uint64
	// LastSuccess is when the latest run without an infrastructure error
	// started; zero if none yet.
	LastSuccess time.Time
	// LastDuration is how long the latest run took.
	LastDuration time.Duration
}

// Snapshot is what the collector reads on every scrape: the latest result of
// every check, the conditions computed from them and the loop's run counts.
type Snapshot struct {
	// Results are the latest results, one per check.
	Results []check.Result
	// Conditions are the Node conditions ipvs-guard owns; nil means none are
	// exposed (e.g. diagnose, which publishes no conditions).
	Conditions []Condition
	// Checks are the reconcile loop's run counts, one per enabled check.
	Checks []CheckRuns
}

// Collector exposes the node's current state as const metrics computed from a
// [Snapshot] at scrape time. It is safe for concurrent scrapes as long as the
// snapshot function is.
type Collector struct {
	snapshot func() Snapshot
	info     version.Info

	buildInfo             *prometheus.Desc
	checkStatus           *prometheus.Desc
	conditionStatus       *prometheus.Desc
	conditionReason       *prometheus.Desc
	moduleLoaded          *prometheus.Desc
	moduleDeclared        *prometheus.Desc
	moduleAvailable       *prometheus.Desc
	moduleStale           *prometheus.Desc
	kubeProxyMode         *prometheus.Desc
	kubeProxyStrictARP    *prometheus.Desc
	virtualServers        *prometheus.Desc
	virtualServersNoReal  *prometheus.Desc
	arpProbeResult        *prometheus.Desc
	arpResponders         *prometheus.Desc
	arpProbeRTT           *prometheus.Desc
	arpAnnouncerChanges   *prometheus.Desc
	arpNoReplyCause       *prometheus.Desc
	lbIPConflict          *prometheus.Desc
	arpNotPreferred       *prometheus.Desc
	nftablesReady         *prometheus.Desc
	nftablesFindings      *prometheus.Desc
	ipvsLeftovers         *prometheus.Desc
	reconcileTotal        *prometheus.Desc
	reconcileErrors       *prometheus.Desc
	reconcileLastSuccess  *prometheus.Desc
	reconcileLastDuration *prometheus.Desc
	ipvsDriftFindings     *prometheus.Desc
	ipvsGoneConnections   *prometheus.Desc

	dataPlane dataPlaneDescs
}

// dataPlaneDescs are the families of kube-proxy's sync freshness and of the
// advisory checks (docs/design.md §3b).
type dataPlaneDescs struct {
	kpLastSync       *prometheus.Desc
	kpLastQueued     *prometheus.Desc
	kpSyncStale      *prometheus.Desc
	kpHealthTimeout  *prometheus.Desc
	advisory         *prometheus.Desc
	sysctlValue      *prometheus.Desc
	conntrackEntries *prometheus.Desc
	conntrackMax     *prometheus.Desc
}

func newDataPlaneDescs(d func(sub, name, help string, labels ...string) *prometheus.Desc) dataPlaneDescs {
	return dataPlaneDescs{
		kpLastSync: d("kube_proxy", "sync_last_timestamp_seconds",
			"Unix time kube-proxy last synced its rules, by IP family, as its /metrics reports (kubeproxy_sync_proxy_rules_last_timestamp_seconds).",
			"ip_family"),
		kpLastQueued: d("kube_proxy", "sync_last_queued_timestamp_seconds",
			"Unix time kube-proxy last queued a sync of its rules (a Service or endpoint change), by IP family; later than the last sync means an update waits.",
			"ip_family"),
		kpSyncStale: d("kube_proxy", "sync_stale",
			"Whether an update has waited longer than kube-proxy's health timeout with no sync since (1) or not (0), by IP family (kube-proxy in IPVS mode only).",
			"ip_family"),
		kpHealthTimeout: d("kube_proxy", "health_timeout_seconds",
			"kube-proxy's health timeout: twice its sync period, from /configz."),
		advisory: d("", "advisory",
			"An advisory finding is present (always 1; absent when not): a setting that risks traffic without breaking it now. severity is info or warning.",
			"check", "advisory", "severity"),
		sysctlValue: d("", "sysctl_value",
			"Value of a sysctl an advisory check judges (net.ipv4.vs.*, net.ipv4.tcp_keepalive_time), or of an IPVS timeout in seconds (ipvs.timeout.tcp, ipvs.timeout.tcpfin, ipvs.timeout.udp).",
			"sysctl"),
		conntrackEntries: d("conntrack", "entries",
			"Number of entries in the netfilter connection tracking table (net.netfilter.nf_conntrack_count)."),
		conntrackMax: d("conntrack", "max",
			"Size limit of the netfilter connection tracking table (net.netfilter.nf_conntrack_max); at the limit, packets of new connections are dropped."),
	}
}

func (d dataPlaneDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.kpLastSync, d.kpLastQueued, d.kpSyncStale, d.kpHealthTimeout, d.advisory, d.sysctlValue, d.conntrackEntries, d.conntrackMax}
}

// collectDataPlane exposes kube-proxy's sync freshness and the advisory checks' state.
func (c *Collector) collectDataPlane(st nodeState, gauge func(d *prometheus.Desc, v float64, labels ...string)) {
	d := c.dataPlane
	var timeout float64
	for _, fam := range sortedKeys(st.kpSync) {
		k := st.kpSync[fam]
		if k.LastSyncSeconds > 0 {
			gauge(d.kpLastSync, k.LastSyncSeconds, fam)
		}
		if k.LastQueuedSeconds > 0 {
			gauge(d.kpLastQueued, k.LastQueuedSeconds, fam)
		}
		gauge(d.kpSyncStale, boolValue(k.Stale), fam)
		timeout = max(timeout, k.HealthTimeoutSeconds)
	}
	if timeout > 0 {
		gauge(d.kpHealthTimeout, timeout)
	}
	keys := sortedPairKeys(st.advisories)
	for _, k := range keys {
		a := st.advisories[k]
		gauge(d.advisory, 1, a.Check, a.Advisory, a.Severity)
	}
	for _, name := range sortedKeys(st.sysctls) {
		gauge(d.sysctlValue, st.sysctls[name], name)
	}
	if ct := st.conntrack; ct != nil {
		gauge(d.conntrackEntries, ct.Entries)
		gauge(d.conntrackMax, ct.Max)
	}
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector over snapshot, which must return the
// latest state without blocking for long (it is called on every scrape).
func NewCollector(snapshot func() Snapshot) *Collector {
	return newCollector(snapshot, version.Get())
}

func newCollector(snapshot func() Snapshot, info version.Info) *Collector {
	d := func(sub, name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, sub, name), help, labels, nil)
	}
	return &Collector{
		snapshot:  snapshot,
		info:      info,
		dataPlane: newDataPlaneDescs(d),
		buildInfo: d("", "build_info",
			"Build information of the running ipvs-guard binary; the value is always 1.",
			"version", "commit", "build_date", "go_version", "platform"),
		checkStatus: d("check", "status",
			"Latest outcome of each check: 1 for the current status, 0 for the others.",
			"check", "status"),
		conditionStatus: d("node", "condition_status",
			"Status of each Node condition ipvs-guard owns (True means a problem): 1 for the current status, 0 for the others.",
			"condition", "status"),
		conditionReason: d("node", "condition_reason",
			"Current reason of each Node condition ipvs-guard owns; the value is always 1.",
			"condition", "reason"),
		moduleLoaded: d("modules", "loaded",
			"Whether a required kernel module is loaded or built in (1) or not (0).",
			"module"),
		moduleDeclared: d("modules", "declared",
			"Whether a required kernel module is declared for loading at boot in modules-load.d (1) or not (0).",
			"module"),
		moduleAvailable: d("modules", "available",
			"Whether the running kernel ships a required module, on disk or built in (1), or not (0).",
			"module"),
		moduleStale: d("modules", "stale_declaration",
			"Whether a module is declared for boot but absent from the running kernel (1) or not (0).",
			"module"),
		kubeProxyStrictARP: d("kube_proxy", "strict_arp",
			"Whether kube-proxy's configuration (/configz) has IPVS strictARP on (1) or off (0); absent when unknown."),
		kubeProxyMode: d("kube_proxy", "mode",
			"The proxy mode kube-proxy reports on its metrics port; the value is always 1.",
			"mode"),
		virtualServers: d("ipvs", "virtual_servers",
			"Number of IPVS virtual servers in the node's table."),
		virtualServersNoReal: d("ipvs", "virtual_servers_without_real_servers",
			"Number of IPVS virtual servers whose Service has ready endpoints but which have no real servers."),
		arpProbeResult: d("arp", "probe_result",
			"Latest ARP (IPv4) or NDP (IPv6) probe result for a LoadBalancer IP this node probes: 1 for the current result, 0 for the others. service is the IP's Service (namespace/name), empty when unknown.",
			"ip", "family", "interface", "service", "result"),
		arpResponders: d("arp", "responders",
			"Number of distinct MAC addresses that answered the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP.",
			"ip", "family", "interface"),
		arpProbeRTT: d("arp", "probe_rtt_seconds",
			"Round-trip time of the first reply to the latest ARP (IPv4) or NDP (IPv6) probe of a LoadBalancer IP (absent when nothing answered).",
			"ip", "family", "interface"),
		arpAnnouncerChanges: d("arp", "announcer_changes_last_hour",
			"Number of times the MAC answering for a LoadBalancer IP this node probes changed in the last hour (a failover each, or a flap). Like the other per-IP series it covers only the IPs sharded to this node.",
			"ip", "family", "interface"),
		arpNoReplyCause: d("arp", "no_reply_cause",
			"Why a LoadBalancer IP this node probes got no reply, as read from MetalLB's state (e.g. NoL2Advertisement, NodesExcludedFromLoadBalancers); the value is always 1, absent when it is answered or nothing is known.",
			"ip", "family", "service", "cause"),
		lbIPConflict: d("lb_ip", "conflict",
			"A LoadBalancer IP something else claims too: kind node-address (a Node's InternalIP/ExternalIP), interface (an interface of this node other than kube-ipvs0) or service (another Service not sharing it by MetalLB's allow-shared-ip rules); owner is its Service, other the other claimant. The value is always 1.",
			"ip", "kind", "owner", "other"),
		arpNotPreferred: d("arp", "announcer_not_preferred",
			"A LoadBalancer IP this node probes whose announcer (MetalLB's ServiceL2Status) is not the node MetalLB v0.16.2's preferredNodeSelectors weighting prefers among the eligible nodes (an advisory: a node label missing, or the speakers split); the value is always 1.",
			"ip", "service", "announcer", "preferred"),
		nftablesReady: d("nftables", "ready",
			"Whether this node is ready for kube-proxy's nftables mode: 1 when the nftables-readiness report found no blocker, 0 when it found one; absent when the report has not run (an advisory: it feeds no Node condition)."),
		nftablesFindings: d("nftables", "readiness_findings",
			"Number of findings of the latest nftables-readiness report, by kind (kernel-version, nft-expression, foreign-virtual-server, …) and severity (blocker, change, info).",
			"kind", "severity"),
		ipvsLeftovers: d("ipvs", "leftovers",
			"Number of things IPVS mode left behind once kube-proxy runs another mode, by kind (kube-ipvs0, virtual-server, ipset, sysctl, modules-load-file).",
			"kind"),
		reconcileTotal: d("reconcile", "total",
			"Number of finished check runs by the reconcile loop, by check.",
			"check"),
		reconcileErrors: d("reconcile", "errors_total",
			"Number of check runs that could not complete (infrastructure errors such as EPERM on netlink), by check.",
			"check"),
		reconcileLastSuccess: d("reconcile", "last_success_timestamp_seconds",
			"Unix time the last check run without an infrastructure error started, by check (absent before the first).",
			"check"),
		reconcileLastDuration: d("reconcile", "last_duration_seconds",
			"Duration of the latest check run, including any remediation, by check.",
			"check"),
		ipvsDriftFindings: d("ipvs", "drift_findings",
			"Divergences between the IPVS table and the cluster after the settle grace, by kind: stale-real-server, missing-real-server, stuck-weight-zero (these make KubeProxyDataplaneDegraded True), ghost-virtual-server, ghost-address, weight-zero-leftover, connections-to-gone-backend, foreign-virtual-server (advisories).",
			"kind"),
		ipvsGoneConnections: d("ipvs", "gone_backend_connections",
			"IPVS connection entries of a Service's virtual servers whose real server is no endpoint of the Service any more, by Service (namespace/name) and protocol.",
			"service", "protocol"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.buildInfo, c.checkStatus, c.conditionStatus, c.conditionReason,
		c.moduleLoaded, c.moduleDeclared, c.moduleAvailable, c.moduleStale,
		c.kubeProxyMode, c.kubeProxyStrictARP, c.virtualServers, c.virtualServersNoReal,
		c.arpProbeResult, c.arpResponders, c.arpProbeRTT, c.arpAnnouncerChanges, c.arpNoReplyCause, c.lbIPConflict, c.arpNotPreferred,
		c.nftablesReady, c.nftablesFindings, c.ipvsLeftovers,
		c.reconcileTotal, c.reconcileErrors, c.reconcileLastSuccess, c.reconcileLastDuration,
		c.ipvsDriftFindings, c.ipvsGoneConnections,
	} {
		ch <- d
	}
	for _, d := range c.dataPlane.all() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- constMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.buildInfo, 1, c.info.Version, c.info.Commit, c.info.BuildDate, c.info.GoVersion, c.info.Platform)

	snap := c.snapshot()
	for _, r := range snap.Checks {
		ch <- constMetric(c.reconcileTotal, prometheus.CounterValue, float64(r.Runs), r.Name)
		ch <- constMetric(c.reconcileErrors, prometheus.CounterValue, float64(r.Errors), r.Name)
		if !r.LastSuccess.IsZero() {
			gauge(c.reconcileLastSuccess, float64(r.LastSuccess.UnixNano())/1e9, r.Name)
		}
		if r.Runs > 0 {
			gauge(c.reconcileLastDuration, r.LastDuration.Seconds(), r.Name)
		}
	}
	for _, cond := range snap.Conditions {
		for _, s := range conditionStatuses {
			gauge(c.conditionStatus, boolValue(cond.Status == s), cond.Type, s)
		}
		if cond.Reason != "" {
			gauge(c.conditionReason, 1, cond.Type, cond.Reason)
		}
	}

	for _, r := range snap.Results {
		for _, s := range checkStatuses {
			gauge(c.checkStatus, boolValue(r.Status == s), r.Name, string(s))
		}
		if r.Name == check.NameNFTablesReadiness && (r.Status == check.StatusOK || r.Status == check.StatusProblem) {
			gauge(c.nftablesReady, boolValue(r.Status == check.StatusOK))
		}
	}

	st := stateOf(snap.Results...)
	if st.mode != "" {
		gauge(c.kubeProxyMode, 1, st.mode)
	}
	if st.strictARP != nil {
		gauge(c.kubeProxyStrictARP, boolValue(*st.strictARP))
	}
	if st.virtualServers != nil {
		gauge(c.virtualServers, float64(*st.virtualServers))
	}
	if st.withoutReal != nil {
		gauge(c.virtualServersNoReal, float64(*st.withoutReal))
	}
	for _, name := range sortedKeys(st.modules) {
		m := st.modules[name]
		gauge(c.moduleLoaded, boolValue(m.Loaded), name)
		gauge(c.moduleDeclared, boolValue(m.Declared), name)
		gauge(c.moduleAvailable, boolValue(m.Available), name)
		gauge(c.moduleStale, boolValue(m.Stale), name)
	}
	c.collectDataPlane(st, gauge)
	rkeys := sortedPairKeys(st.readiness)
	for _, k := range rkeys {
		gauge(c.nftablesFindings, float64(st.readiness[k]), k[0], k[1])
	}
	for _, k := range sortedKeys(st.leftovers) {
		gauge(c.ipvsLeftovers, float64(st.leftovers[k]), k)
	}
	keys := sortedPairKeys(st.arp)
	for _, k := range keys {
		a := st.arp[k]
		for _, res := range arpResults {
			gauge(c.arpProbeResult, boolValue(a.Result == res), a.IP, a.Family, a.Interface, a.Service, res)
		}
		gauge(c.arpResponders, float64(a.Responders), a.IP, a.Family, a.Interface)
		gauge(c.arpAnnouncerChanges, float64(a.AnnouncerChanges), a.IP, a.Family, a.Interface)
		if a.Responders > 0 && a.RTTSeconds > 0 {
			gauge(c.arpProbeRTT, a.RTTSeconds, a.IP, a.Family, a.Interface)
		}
	}
	causes := map[[4]string]bool{} // one series per IP and cause, whatever the interface
	for _, k := range keys {
		if a := st.arp[k]; a.Cause != "" && a.Result == "no-reply" && !causes[[4]string{a.IP, a.Family, a.Service, a.Cause}] {
			causes[[4]string{a.IP, a.Family, a.Service, a.Cause}] = true
			gauge(c.arpNoReplyCause, 1, a.IP, a.Family, a.Service, a.Cause)
		}
	}
	conflicts := make([]check.LBIPConflictState, 0, len(st.conflicts))
	for k := range st.conflicts {
		conflicts = append(conflicts, k)
	}
	sort.Slice(conflicts, func(i, j int) bool {
		a, b := conflicts[i], conflicts[j]
		return a.IP+"\x00"+a.Kind+"\x00"+a.Owner+"\x00"+a.Other < b.IP+"\x00"+b.Kind+"\x00"+b.Owner+"\x00"+b.Other
	})
	for _, k := range conflicts {
		gauge(c.lbIPConflict, 1, k.IP, k.Kind, k.Owner, k.Other)
	}
	notPreferred := make([]check.ARPPreferenceState, 0, len(st.notPreferred))
	for k := range st.notPreferred {
		notPreferred = append(notPreferred, k)
	}
	sort.Slice(notPreferred, func(i, j int) bool {
		a, b := notPreferred[i], notPreferred[j]
		return a.IP+"\x00"+a.Service+"\x00"+a.Announcer+"\x00"+a.Preferred < b.IP+"\x00"+b.Service+"\x00"+b.Announcer+"\x00"+b.Preferred
	})
	for _, k := range notPreferred {
		gauge(c.arpNotPreferred, 1, k.IP, k.Service, k.Announcer, k.Preferred)
	}
	if d := st.drift; d != nil {
		for _, kind := range sortedKeys(d.Findings) {
			gauge(c.ipvsDriftFindings, float64(d.Findings[kind]), kind)
		}
		gone := make([]check.ServiceProtocol, 0, len(d.GoneBackendConnections))
		for k := range d.GoneBackendConnections {
			gone = append(gone, k)
		}
		sort.Slice(gone, func(i, j int) bool {
			if gone[i].Service != gone[j].Service {
				return gone[i].Service < gone[j].Service
			}
			return gone[i].Protocol < gone[j].Protocol
		})
		for _, k := range gone {
			gauge(c.ipvsGoneConnections, float64(d.GoneBackendConnections[k]), k.Service, k.Protocol)
		}
	}
}

// constMetric is the one place Collect makes a series. Label values come
// from outside (a module name built from kube-proxy's scheduler, an
// interface name, which the kernel lets hold any byte): invalid UTF-8 is
// replaced with U+FFFD, as prometheus.MustNewConstMetric would otherwise
// panic and fail the whole scrape. Line breaks and quotes need nothing here:
// the exposition format escapes them.
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	for i, l := range labels {
		if !utf8.ValidString(l) {
			labels[i] = strings.ToValidUTF8(l, "\uFFFD")
		}
	}
	return prometheus.MustNewConstMetric(d, t, v, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sortedPairKeys returns the keys of m in order, by first then second.
func sortedPairKeys[V any](m map[[2]string]V) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return keys
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

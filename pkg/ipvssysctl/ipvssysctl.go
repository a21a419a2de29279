// SPDX-License-Identifier: Apache-2.0

// Package ipvssysctl holds two advisory checks (docs/design.md §3b): the
// ipvs-sysctls check judges the IPVS sysctls kube-proxy depends on and IPVS's
// connection timeouts against TCP keepalive, by the running kernel's version;
// the conntrack check watches the netfilter connection table fill up. Their
// findings go to diagnose, metrics and info/warning alerts, never to a Node
// condition.
package ipvssysctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// Severities of an advisory.
const (
	SeverityInfo    = "info"
	SeverityWarning = "warning"
)

// Advisories of the ipvs-sysctls check (stable: metric labels and runbook pages).
const (
	AdvisoryConnReuseDelay         = "IPVSConnReuseDelay"
	AdvisoryConnReuseStickyBackend = "IPVSConnReuseStickyBackend"
	AdvisoryExpireNodestConnOff    = "IPVSExpireNodestConnOff"
	AdvisoryExpireQuiescentOff     = "IPVSExpireQuiescentTemplateOff"
	AdvisoryConntrackOff           = "IPVSConntrackOff"
	AdvisoryTCPTimeoutBelowKeep    = "IPVSTCPTimeoutBelowKeepalive"
)

// Reasons of the ipvs-sysctls check.
const (
	ReasonSysctlsOK        = "IPVSSysctlsOK"
	ReasonSysctlAdvisories = "IPVSSysctlAdvisories"
	ReasonIPVSNotLoaded    = "IPVSModuleNotLoaded"
)

// Sysctl names (dotted, as `sysctl` prints them).
const (
	SysctlConnReuseMode     = "net.ipv4.vs.conn_reuse_mode"
	SysctlExpireNodestConn  = "net.ipv4.vs.expire_nodest_conn"
	SysctlExpireQuiescent   = "net.ipv4.vs.expire_quiescent_template"
	SysctlVSConntrack       = "net.ipv4.vs.conntrack"
	SysctlTCPKeepaliveTime  = "net.ipv4.tcp_keepalive_time"
	TimeoutTCP              = "ipvs.timeout.tcp"
	TimeoutTCPFin           = "ipvs.timeout.tcpfin"
	TimeoutUDP              = "ipvs.timeout.udp"
	defaultTCPKeepaliveTime = 7200
)

// limitSysctl bounds one sysctl value (a few bytes on a real node).
var limitSysctl = hostfs.Limit{Kind: "a sysctl value", Max: 4 << 10}

// Finding is one sysctl or IPVS timeout, with the advisory it raises, if any.
type Finding struct {
	// Sysctl is the dotted sysctl name, or ipvs.timeout.tcp|tcpfin|udp.
	Sysctl string `json:"sysctl"`
	// Value is its value (seconds for a timeout).
	Value int64 `json:"value"`
	// Want is the value kube-proxy sets or that avoids the advisory ("" when any is fine).
	Want string `json:"want,omitempty"`
	// Severity is info or warning when the value raises an advisory, else "".
	Severity string `json:"severity,omitempty"`
	// Advisory is the advisory's stable name, "" when none.
	Advisory string `json:"advisory,omitempty"`
	// Why says what the value does to traffic and the fix.
	Why string `json:"why,omitempty"`
}

// String renders the finding as one line.
func (f Finding) String() string {
	s := fmt.Sprintf("%s = %d", f.Sysctl, f.Value)
	if f.Advisory == "" {
		return s
	}
	return fmt.Sprintf("%s: %s %s: %s", s, f.Severity, f.Advisory, f.Why)
}

// State implements check.Finding: the value, and the advisory when raised.
func (f Finding) State() check.State {
	st := check.State{Sysctl: &check.SysctlState{Name: f.Sysctl, Value: float64(f.Value)}}
	if f.Advisory != "" {
		st.Advisory = &check.AdvisoryState{Check: check.NameIPVSSysctls, Advisory: f.Advisory, Severity: f.Severity}
	}
	return st
}

// Config builds the ipvs-sysctls checker.
type Config struct {
	// Root is the host's filesystem (sysctls under <root>/proc/sys).
	Root hostfs.Root
	// Timeouts reads IPVS's timeouts; nil leaves them out.
	Timeouts ipvs.TimeoutReader
	// IPVSUse, when set, is asked on every run whether the IPVS
	// prerequisites apply; when they do not, the check says so.
	IPVSUse check.IPVSUseFunc
}

// Checker is the ipvs-sysctls check.
type Checker struct{ cfg Config }

var _ check.Checker = (*Checker)(nil)

// NewChecker returns the ipvs-sysctls checker.
func NewChecker(cfg Config) *Checker { return &Checker{cfg: cfg} }

// Name implements check.Checker.
func (c *Checker) Name() string { return check.NameIPVSSysctls }

// Run implements check.Checker.
func (c *Checker) Run(ctx context.Context) (check.Result, error) {
	logger := klog.FromContext(ctx).WithValues("check", check.NameIPVSSysctls)
	if c.cfg.IPVSUse != nil {
		if use := c.cfg.IPVSUse(ctx); !use.Applies {
			return use.NotInUse(c.Name()), nil
		}
	}
	loaded, err := ipvs.ModuleLoaded(c.cfg.Root)
	if err != nil {
		return check.Result{}, err
	}
	if !loaded {
		return check.Skipped(c.Name(), ReasonIPVSNotLoaded, "ip_vs is not loaded: its sysctls do not exist yet (see the modules check)"), nil
	}
	rel, err := c.cfg.Root.KernelRelease()
	if err != nil {
		return check.Result{}, err
	}
	kv, err := ParseKernelVersion(rel)
	if err != nil {
		return check.Result{}, err
	}
	r := Reading{Kernel: kv, Values: map[string]int64{}}
	for _, name := range []string{SysctlConnReuseMode, SysctlExpireNodestConn, SysctlExpireQuiescent, SysctlVSConntrack, SysctlTCPKeepaliveTime} {
		v, err := readSysctl(c.cfg.Root, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // conn_reuse_mode before 4.1; a kernel without one of them
		}
		if err != nil {
			return check.Result{}, err
		}
		r.Values[name] = v
	}
	if c.cfg.Timeouts != nil {
		t, err := c.cfg.Timeouts.Timeouts(ctx)
		if err != nil {
			logger.V(2).Info("IPVS timeouts unavailable", "err", err)
			r.TimeoutsErr = err
		} else {
			r.Timeouts = &t
		}
	}
	return Judge(r), nil
}

// Reading is what the check read from the node.
type Reading struct {
	// Kernel is the running kernel's version.
	Kernel KernelVersion
	// Values maps a dotted sysctl name to its value; an absent name does
	// not exist on this kernel.
	Values map[string]int64
	// Timeouts are IPVS's timeouts (nil: not read, TimeoutsErr says why).
	Timeouts    *ipvs.Timeouts
	TimeoutsErr error
}

// Judge turns a reading into the check's result: one finding per value,
// an advisory for each risky one, status ok (advisories never make the node
// unhealthy).
func Judge(r Reading) check.Result {
	var fs []Finding
	add := func(f Finding) { fs = append(fs, f) }
	if v, ok := r.Values[SysctlConnReuseMode]; ok {
		f := Finding{Sysctl: SysctlConnReuseMode, Value: v}
		switch {
		case r.Kernel.Less(4, 1):
		case r.Kernel.Less(5, 9) && v != 0:
			f.Want, f.Severity, f.Advisory = "0", SeverityWarning, AdvisoryConnReuseDelay
			f.Why = fmt.Sprintf("on kernel %s (before 5.9) conn_reuse_mode=%d drops the first SYN of a connection that reuses the source port of an old one, a 1 s delay per such connection under load (kubernetes#81775, kubernetes PR #102122); kube-proxy sets 0 on these kernels, so something reset it: `sysctl -w %s=0` and find what sets it (a sysctl.d file)", r.Kernel, v, SysctlConnReuseMode)
		case r.Kernel.Less(5, 9):
			f.Severity, f.Advisory = SeverityInfo, AdvisoryConnReuseStickyBackend
			f.Why = fmt.Sprintf("on kernel %s (before 5.9) kube-proxy sets 0 to avoid 1 s delays, at a cost: a connection reusing a source port keeps the real server of the old one, even one being removed, so rolling updates can send traffic to terminating pods (kubernetes#81775); a kernel from 5.9 on needs neither (kubernetes#93297)", r.Kernel)
		case v != 1:
			f.Want, f.Severity, f.Advisory = "1", SeverityInfo, AdvisoryConnReuseStickyBackend
			f.Why = fmt.Sprintf("kernel %s has the 5.9 fix of the 1 s delay, so kube-proxy leaves the kernel default 1 (kubernetes#93297); %d keeps connections that reuse a source port on the old real server, even one being removed: `sysctl -w %s=1`", r.Kernel, v, SysctlConnReuseMode)
		}
		add(f)
	}
	want1 := func(name, advisory, why string) {
		v, ok := r.Values[name]
		if !ok {
			return
		}
		f := Finding{Sysctl: name, Value: v}
		if v != 1 {
			f.Want, f.Severity, f.Advisory = "1", SeverityWarning, advisory
			f.Why = why + fmt.Sprintf("; kube-proxy sets 1 when it starts, so something reset it: `sysctl -w %s=1` and find what sets it", name)
		}
		add(f)
	}
	want1(SysctlExpireNodestConn, AdvisoryExpireNodestConnOff,
		"connection entries whose real server was deleted are not expired: their packets are dropped until the entry times out, so clients of a removed pod hang (UDP above all: DNS timeouts for minutes after a CoreDNS pod goes, kubernetes#71514)")
	want1(SysctlExpireQuiescent, AdvisoryExpireQuiescentOff,
		"persistence templates of a real server at weight 0 are kept, so Services with sessionAffinity: ClientIP keep sending clients to a terminating pod (kubernetes#71809)")
	want1(SysctlVSConntrack, AdvisoryConntrackOff,
		"IPVS connections are not tracked by netfilter, so kube-proxy's masquerade rules (SNAT of NodePort and LoadBalancer traffic) and conntrack-based filtering do not see them")
	keep := int64(defaultTCPKeepaliveTime)
	if v, ok := r.Values[SysctlTCPKeepaliveTime]; ok {
		keep = v
		add(Finding{Sysctl: SysctlTCPKeepaliveTime, Value: v})
	}
	if t := r.Timeouts; t != nil {
		tcp := int64(t.TCP / time.Second)
		f := Finding{Sysctl: TimeoutTCP, Value: tcp}
		if tcp > 0 && keep >= tcp {
			f.Want, f.Severity, f.Advisory = fmt.Sprintf("> %d", keep), SeverityWarning, AdvisoryTCPTimeoutBelowKeep
			f.Why = fmt.Sprintf("IPVS forgets an idle TCP connection after %d s, before the first keepalive probe at %d s (%s), so idle connections through a Service or LoadBalancer IP are cut (kubernetes#80298: 503s after 900 s idle; kops#6889): set kube-proxy's ipvs.tcpTimeout (--ipvs-tcp-timeout) above the keepalive time, or lower tcp_keepalive_time below %d s where the clients run (it is per network namespace: pods set their own)", tcp, keep, SysctlTCPKeepaliveTime, tcp)
		}
		add(f)
		add(Finding{Sysctl: TimeoutTCPFin, Value: int64(t.TCPFin / time.Second)})
		add(Finding{Sysctl: TimeoutUDP, Value: int64(t.UDP / time.Second)})
	}
	res := check.Result{Name: check.NameIPVSSysctls, Status: check.StatusOK, Reason: ReasonSysctlsOK}
	var adv []string
	for _, f := range fs {
		res.Findings = append(res.Findings, f)
		if f.Advisory != "" {
			adv = append(adv, fmt.Sprintf("%s=%d (%s %s)", f.Sysctl, f.Value, f.Severity, f.Advisory))
			if f.Want != "" && strings.HasPrefix(f.Sysctl, "net.") {
				res.Remediation = append(res.Remediation, check.Steps(fmt.Sprintf("sysctl -w %s=%s", f.Sysctl, f.Want))...)
			}
		}
	}
	if res.Findings == nil {
		res.Findings = []check.Finding{}
	}
	switch {
	case len(adv) > 0:
		res.Reason = ReasonSysctlAdvisories
		res.Message = fmt.Sprintf("kernel %s: %s (advisories: traffic flows, but see each finding for what it risks)", r.Kernel, strings.Join(adv, ", "))
	default:
		res.Message = fmt.Sprintf("kernel %s: the IPVS sysctls are as kube-proxy sets them", r.Kernel)
		if r.Timeouts != nil {
			res.Message += " and IPVS's TCP timeout outlasts TCP keepalive"
		}
	}
	if r.TimeoutsErr != nil {
		res.Message += fmt.Sprintf("; IPVS timeouts unknown: %v", r.TimeoutsErr)
	}
	return res
}

// readSysctl reads a dotted sysctl under <root>/proc/sys.
func readSysctl(root hostfs.Root, name string) (int64, error) {
	p := path.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
	b, err := root.ReadFile(p, limitSysctl)
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0, fmt.Errorf("reading %s: empty", root.Path(p))
	}
	v, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", root.Path(p), err)
	}
	return v, nil
}

// KernelVersion is a kernel's major.minor.patch.
type KernelVersion struct{ Major, Minor, Patch int }

// String renders it as major.minor.patch.
func (k KernelVersion) String() string { return fmt.Sprintf("%d.%d.%d", k.Major, k.Minor, k.Patch) }

// Less reports whether k is older than major.minor.
func (k KernelVersion) Less(major, minor int) bool {
	return k.Major < major || (k.Major == major && k.Minor < minor)
}

// ParseKernelVersion parses a kernel release such as 6.1.0-56-amd64 or
// 5.4.0-150-generic or 4.18.0-553.el8_10.x86_64 (its leading numbers,
// through k8s.io/apimachinery's generic version parser).
func ParseKernelVersion(rel string) (KernelVersion, error) {
	v, err := utilversion.ParseGeneric(rel)
	if err != nil {
		return KernelVersion{}, fmt.Errorf("kernel release %q: %w", rel, err)
	}
	return KernelVersion{Major: int(v.Major()), Minor: int(v.Minor()), Patch: int(v.Patch())}, nil
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// DecideIPVSUse decides whether the IPVS prerequisites apply on a node
// whose kube-proxy serves its metrics port at addr, from what it answered:
// running is /proxyMode (runErr its error), configured the effective mode of
// /configz (cfgErr its error).
//
//   - kube-proxy not readable (/proxyMode failed): IPVS is assumed, and the
//     message says so;
//   - running ipvs, or configured for ipvs whatever it runs (a fallback is
//     the problem the checks report): the prerequisites apply;
//   - running another mode, /configz unreadable: IPVS is assumed, and the
//     message says so;
//   - running and configured for modes other than ipvs: they do not apply.
func DecideIPVSUse(addr, running string, runErr error, configured string, cfgErr error) check.IPVSUse {
	switch {
	case runErr != nil:
		return check.IPVSUse{Applies: true, Assumed: true, Message: fmt.Sprintf("kube-proxy not reachable at %s: assuming IPVS mode", addr)}
	case running == ModeIPVS:
		return check.IPVSUse{Applies: true, Mode: running}
	case cfgErr != nil:
		return check.IPVSUse{Applies: true, Assumed: true, Mode: running, Message: fmt.Sprintf(
			"kube-proxy at %s runs in %s mode but its /configz is not readable: assuming it is configured for IPVS mode", addr, running)}
	case configured == ModeIPVS:
		return check.IPVSUse{Applies: true, Mode: running}
	case configured == running:
		return check.IPVSUse{Mode: running, Message: fmt.Sprintf(
			"kube-proxy runs in %s mode, as configured: the IPVS prerequisites do not apply", running)}
	default:
		return check.IPVSUse{Mode: running, Message: fmt.Sprintf(
			"kube-proxy is configured for %s mode and runs in %s mode: the IPVS prerequisites do not apply", configured, running)}
	}
}

// UseResolver answers check.IPVSUseFunc from kube-proxy's metrics port,
// asking it (/proxyMode, /configz) at most once per ttl, so the checks of
// one pass share one pair of requests. Safe for concurrent use.
//
// When kube-proxy does not tell its configured mode (not reachable, or
// /configz unreadable), the mode is resolved from the fallback sources in
// order (the node's configuration, then the kernel's state: see
// ResolveMode), then from what kube-proxy last reported to this process.
// When none tells, the mode is unknown: the checks report, and nothing is
// loaded, declared or removed (check.IPVSUse.Unknown). A kube-proxy
// restart on a migrated node, or an agent started before kube-proxy, must
// not make a remediating agent load and declare the IPVS modules.
type UseResolver struct {
	client   *Client
	ttl      time.Duration
	now      func() time.Time
	fallback []ModeSource
	assumed  string

	mu   sync.Mutex
	at   time.Time
	last check.IPVSUse
	ok   bool
	// known is the last answer read from kube-proxy itself (knownOK).
	known   check.IPVSUse
	knownOK bool
}

// DefaultUseTTL is how long a UseResolver reuses kube-proxy's answer: the
// checks of one pass, never two resyncs.
const DefaultUseTTL = 5 * time.Second

// NewUseResolver returns a UseResolver over c; ttl 0 is DefaultUseTTL.
// fallback are asked, in order, when kube-proxy does not tell its
// configured mode.
func NewUseResolver(c *Client, ttl time.Duration, fallback ...ModeSource) *UseResolver {
	if ttl <= 0 {
		ttl = DefaultUseTTL
	}
	return &UseResolver{client: c, ttl: ttl, now: time.Now, fallback: fallback}
}

// WithAssumedMode sets the mode taken when no source tells one, not even
// kube-proxy's last report (the operator's --assume-proxy-mode); "" leaves
// the mode unknown then. It returns r.
func (r *UseResolver) WithAssumedMode(mode string) *UseResolver {
	r.assumed = mode
	return r
}

// Use returns whether the IPVS prerequisites apply now.
func (r *UseResolver) Use(ctx context.Context) check.IPVSUse {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok && r.now().Sub(r.at) < r.ttl {
		return r.last
	}
	running, runErr := r.client.ProxyMode(ctx)
	var configured string
	var cfgErr error
	if runErr == nil && running != ModeIPVS {
		var cfg Config
		if cfg, cfgErr = r.client.Configz(ctx); cfgErr == nil {
			configured = cfg.EffectiveMode()
		}
	}
	var u check.IPVSUse
	if runErr == nil && (cfgErr == nil || running == ModeIPVS) {
		u = DecideIPVSUse(r.client.Address(), running, nil, configured, nil)
		r.known, r.knownOK = u, true
	} else {
		u = r.resolve(ctx, running, runErr)
		klog.FromContext(ctx).V(2).Info("Deciding whether IPVS applies", "proxyModeErr", runErr, "configzErr", cfgErr,
			"applies", u.Applies, "unknown", u.Unknown, "message", u.Message)
	}
	if ctx.Err() == nil {
		r.at, r.last, r.ok = r.now(), u, true
	}
	return u
}

// resolve decides when kube-proxy did not tell its configured mode: it is
// not reachable (runErr), or it runs running (not ipvs) and its /configz
// is unreadable.
func (r *UseResolver) resolve(ctx context.Context, running string, runErr error) check.IPVSUse {
	var said string
	if runErr != nil {
		said = fmt.Sprintf("kube-proxy not reachable at %s", r.client.Address())
	} else {
		said = fmt.Sprintf("kube-proxy at %s runs in %s mode but its /configz is not readable", r.client.Address(), running)
	}
	res := ResolveMode(ctx, r.fallback...)
	switch {
	case res.Known() && res.Mode == ModeIPVS:
		return check.IPVSUse{Applies: true, Assumed: true, Mode: running, Message: fmt.Sprintf("%s: configured for %s", said, res)}
	case res.Known() && runErr == nil:
		return check.IPVSUse{Mode: running, Assumed: true, Message: fmt.Sprintf(
			"%s: configured for %s: the IPVS prerequisites do not apply", said, res)}
	case res.Known():
		return check.IPVSUse{Mode: res.Mode, Assumed: true, Message: fmt.Sprintf(
			"%s: configured for %s: the IPVS prerequisites do not apply", said, res)}
	case runErr != nil && r.knownOK && !r.known.Applies:
		return check.IPVSUse{Mode: r.known.Mode, Assumed: true, Message: fmt.Sprintf(
			"%s: assuming %s mode, as it last reported: the IPVS prerequisites do not apply", said, r.known.Mode)}
	case r.assumed == ModeIPVS:
		return check.IPVSUse{Applies: true, Assumed: true, Mode: running, Message: fmt.Sprintf(
			"%s: assuming it is configured for ipvs mode (%s)", said, SourceFlag)}
	case r.assumed != "":
		m := r.assumed
		if runErr == nil {
			m = running
		}
		return check.IPVSUse{Mode: m, Assumed: true, Message: fmt.Sprintf(
			"%s: assuming it is configured for %s mode (%s): the IPVS prerequisites do not apply", said, r.assumed, SourceFlag)}
	}
	why := res.String()
	if runErr != nil && r.knownOK {
		why += fmt.Sprintf("; %s: it reported %s mode, which is no proof of its mode now", SourceLastReport, orIPVS(r.known.Mode))
	}
	return check.IPVSUse{Applies: true, Assumed: true, Unknown: true, Mode: running, Message: fmt.Sprintf(
		"kube-proxy's mode is not known yet: %s; %s: nothing is loaded or declared until it is", said, why)}
}

func orIPVS(m string) string {
	if m == "" {
		return ModeIPVS
	}
	return m
}

// LastMode reads kube-proxy's mode and keeps the last one it reported: a
// kube-proxy that stops answering (stopped, hung) has not changed its mode,
// and what it programmed is then what matters most. The checks that judge
// what kube-proxy programmed in a mode hold one each. Callers serialise its
// use.
type LastMode struct {
	// Read returns the mode kube-proxy reports (Client.ProxyMode).
	Read func(ctx context.Context) (string, error)
	last string
}

// Mode returns the mode kube-proxy reports, or the last one it reported
// while it does not answer. An error wrapping ErrUnreachable (its port
// refuses connections: no kube-proxy to judge) forgets the last mode.
func (m *LastMode) Mode(ctx context.Context) (string, error) {
	mode, err := m.Read(ctx)
	switch {
	case errors.Is(err, ErrUnreachable):
		m.last = ""
		return "", err
	case err == nil:
		m.last = mode
		return mode, nil
	case m.last != "" && ctx.Err() == nil:
		klog.FromContext(ctx).V(2).Info("kube-proxy does not answer; judging the mode it last reported", "mode", m.last, "err", err)
		return m.last, nil
	}
	return "", fmt.Errorf("reading kube-proxy's mode: %w", err)
}

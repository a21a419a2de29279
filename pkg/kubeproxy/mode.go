// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
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
// A kube-proxy that last reported, configured and running, a mode other
// than IPVS and is not reachable now (restarting, upgraded) is taken to be
// in that mode still, and the message says so: a kube-proxy restart on a
// migrated node must not make a remediating agent load and declare the IPVS
// modules. Only a process that never read kube-proxy assumes IPVS.
type UseResolver struct {
	client *Client
	ttl    time.Duration
	now    func() time.Time

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
func NewUseResolver(c *Client, ttl time.Duration) *UseResolver {
	if ttl <= 0 {
		ttl = DefaultUseTTL
	}
	return &UseResolver{client: c, ttl: ttl, now: time.Now}
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
	u := DecideIPVSUse(r.client.Address(), running, runErr, configured, cfgErr)
	switch {
	case runErr == nil && cfgErr == nil || runErr == nil && running == ModeIPVS:
		r.known, r.knownOK = u, true
	case runErr != nil && r.knownOK && !r.known.Applies:
		u = check.IPVSUse{Mode: r.known.Mode, Assumed: true, Message: fmt.Sprintf(
			"kube-proxy not reachable at %s: assuming %s mode, as it last reported: the IPVS prerequisites do not apply", r.client.Address(), r.known.Mode)}
	}
	if runErr != nil || cfgErr != nil {
		klog.FromContext(ctx).V(2).Info("Deciding whether IPVS applies", "proxyModeErr", runErr, "configzErr", cfgErr, "applies", u.Applies)
	}
	if ctx.Err() == nil {
		r.at, r.last, r.ok = r.now(), u, true
	}
	return u
}

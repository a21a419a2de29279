// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// SchedulerSource is one place the configured IPVS scheduler may be read from.
type SchedulerSource struct {
	// Name says where the scheduler came from ("kube-proxy /configz", …).
	Name string
	// Get returns the configured scheduler ("" when the source does not set one).
	Get func(ctx context.Context) (string, error)
}

// Scheduler source names returned by ResolveScheduler.
const (
	FromFlag      = "--scheduler"
	FromConfigz   = "kube-proxy /configz"
	FromConfigMap = "kube-proxy ConfigMap"
	FromDefault   = "default"
	// FromLastKnown prefixes the source of a scheduler remembered from an
	// earlier answer while no source answers now.
	FromLastKnown = "last known from "
)

// ConfigzScheduler reads the scheduler from kube-proxy's /configz; a
// configuration without a scheduler means kube-proxy's default, rr.
func ConfigzScheduler(c *Client) SchedulerSource {
	return SchedulerSource{Name: FromConfigz, Get: func(ctx context.Context) (string, error) {
		cfg, err := c.Configz(ctx)
		if err != nil {
			return "", err
		}
		return cfg.EffectiveScheduler(), nil
	}}
}

// ConfigMapScheduler reads ipvs.scheduler from the kube-proxy ConfigMap
// (kube-system/kube-proxy, key config.conf, as kubeadm writes it).
func ConfigMapScheduler(cs kube.Interface) SchedulerSource {
	return SchedulerSource{Name: FromConfigMap, Get: func(ctx context.Context) (string, error) {
		cfg, err := ConfigMapConfig(ctx, cs)
		if err != nil {
			return "", err
		}
		return cfg.IPVS.Scheduler, nil
	}}
}

// ConfigMapTTL is how long the agent reuses what the kube-proxy ConfigMap
// said: every check run resolves the scheduler, and a GET per run would cost
// an API request per check on every node (and, spent from the client's
// token bucket, hold back the status patch a drift calls for).
const ConfigMapTTL = time.Minute

// Cached answers from src's last answer (a scheduler or an error) for ttl,
// then asks src again. clk is the time source; nil means the real clock.
// Safe for concurrent use.
func Cached(src SchedulerSource, ttl time.Duration, clk clock.PassiveClock) SchedulerSource {
	if clk == nil {
		clk = clock.RealClock{}
	}
	var (
		mu    sync.Mutex
		at    time.Time
		sched string
		err   error
	)
	return SchedulerSource{Name: src.Name, Get: func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if at.IsZero() || clk.Since(at) >= ttl {
			sched, err = src.Get(ctx)
			at = clk.Now()
		}
		return sched, err
	}}
}

// ConfigMapConfig reads kube-proxy's configuration from the kube-system/kube-proxy ConfigMap.
func ConfigMapConfig(ctx context.Context, cs kube.Interface) (Config, error) {
	cm, err := cs.ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		return Config{}, fmt.Errorf("reading the kube-proxy ConfigMap: %w", err)
	}
	data, ok := cm.Data["config.conf"]
	if !ok {
		return Config{}, fmt.Errorf("reading the kube-proxy ConfigMap: no config.conf key")
	}
	return ParseConfigFile([]byte(data))
}

// ResolveScheduler returns the IPVS scheduler the checks should assume and
// where it came from (docs/design.md §8): override (the --scheduler flag) when set;
// else the first source that answers with a scheduler (pass
// ConfigzScheduler, then ConfigMapScheduler when a kubeconfig is given); else
// DefaultScheduler. Sources that fail are logged at V(2) and skipped.
func ResolveScheduler(ctx context.Context, override string, sources ...SchedulerSource) (scheduler, from string) {
	if override != "" {
		return override, FromFlag
	}
	logger := klog.FromContext(ctx)
	for _, s := range sources {
		if s.Get == nil {
			continue
		}
		sched, err := s.Get(ctx)
		if err != nil {
			logger.V(2).Info("IPVS scheduler source unavailable", "source", s.Name, "err", err)
			continue
		}
		if sched != "" {
			return sched, s.Name
		}
	}
	return DefaultScheduler, FromDefault
}

// SchedulerResolver resolves the IPVS scheduler on every call, like
// ResolveScheduler, and remembers the last scheduler a source gave. While no
// source answers (kube-proxy crash-looping, often because its scheduler's
// module is missing, and no kube-proxy ConfigMap) it keeps answering with
// that scheduler rather than falling back to the default, so a node agent
// that once saw "lc" keeps wanting ip_vs_lc. Safe for concurrent use.
type SchedulerResolver struct {
	override string
	sources  []SchedulerSource

	// mu guards last and lastFrom.
	mu       sync.Mutex
	last     string
	lastFrom string
}

// NewSchedulerResolver returns a resolver over override (the --scheduler
// flag) and sources, in order.
func NewSchedulerResolver(override string, sources ...SchedulerSource) *SchedulerResolver {
	return &SchedulerResolver{override: override, sources: sources}
}

// Resolve returns the scheduler the checks should assume now and where it came from.
func (r *SchedulerResolver) Resolve(ctx context.Context) (scheduler, from string) {
	s, from := ResolveScheduler(ctx, r.override, r.sources...)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch from {
	case FromDefault:
		if r.last != "" {
			return r.last, FromLastKnown + r.lastFrom
		}
	case FromFlag:
	default:
		r.last, r.lastFrom = s, from
	}
	return s, from
}

// NodeVersion reads kube-proxy's version from the Node's status:
// nodeInfo.kubeProxyVersion where still set (deprecated, no longer set by
// recent kubelets), else the kubelet's version, which kube-proxy matches on
// every supported distribution.
func NodeVersion(cs kube.Interface, node string) VersionSource {
	return func(ctx context.Context) (Version, error) {
		n, err := cs.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return Version{}, fmt.Errorf("reading Node %s: %w", node, err)
		}
		//lint:ignore SA1019 deprecated, but still the exact answer where a kubelet sets it
		v := n.Status.NodeInfo.KubeProxyVersion
		if v == "" {
			v = n.Status.NodeInfo.KubeletVersion
		}
		return ParseVersion(v)
	}
}

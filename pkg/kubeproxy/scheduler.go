// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
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
func ConfigMapScheduler(cs kubernetes.Interface) SchedulerSource {
	return SchedulerSource{Name: FromConfigMap, Get: func(ctx context.Context) (string, error) {
		cfg, err := ConfigMapConfig(ctx, cs)
		if err != nil {
			return "", err
		}
		return cfg.IPVS.Scheduler, nil
	}}
}

// ConfigMapConfig reads kube-proxy's configuration from the kube-system/kube-proxy ConfigMap.
func ConfigMapConfig(ctx context.Context, cs kubernetes.Interface) (Config, error) {
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
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
// where it came from (DESIGN §8): override (the --scheduler flag) when set;
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

// NodeVersion reads kube-proxy's version from the Node's status:
// nodeInfo.kubeProxyVersion where still set (deprecated, no longer set by
// recent kubelets), else the kubelet's version, which kube-proxy matches on
// every supported distribution.
func NodeVersion(cs kubernetes.Interface, node string) VersionSource {
	return func(ctx context.Context) (Version, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return Version{}, fmt.Errorf("reading Node %s: %w", node, err)
		}
		v := n.Status.NodeInfo.KubeProxyVersion //nolint:staticcheck // deprecated, still read where set
		if v == "" {
			v = n.Status.NodeInfo.KubeletVersion
		}
		return ParseVersion(v)
	}
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// RKE2's files that say how it starts kube-proxy on this node.
const (
	// RKE2ConfigFile is RKE2's configuration file; its kube-proxy-arg
	// entries become kube-proxy's flags at RKE2's next start. Every file
	// ending in .yaml or .yml in RKE2ConfigFile + ".d" is read after it, in
	// name order.
	RKE2ConfigFile = "/etc/rancher/rke2/config.yaml"
	// RKE2KubeProxyManifest is the static pod RKE2 rendered for kube-proxy
	// at its last start: what the kubelet runs.
	RKE2KubeProxyManifest = "/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml"
)

// RKE2FileLimit bounds each RKE2 file read (config.yaml, its drop-ins, the
// kube-proxy manifest: a few KiB in practice).
var RKE2FileLimit = hostfs.Limit{Kind: "an RKE2 configuration file", Max: 1 << 20}

// rke2MaxDropIns bounds how many config.yaml.d drop-ins are read.
const rke2MaxDropIns = 64

// kubeProxyArgKey is the config.yaml key RKE2 passes to kube-proxy as flags.
const kubeProxyArgKey = "kube-proxy-arg"

// ModeFromArgs returns the proxy mode kube-proxy's flags args set: the last
// --proxy-mode wins, as in kube-proxy's flag parsing; an argument may also
// lack the leading dashes (RKE2's kube-proxy-arg: "proxy-mode=ipvs"). With
// no --proxy-mode, the mode is kube-proxy's default, iptables, unless a
// --config file is given (then the flags do not tell: ok is false).
func ModeFromArgs(args []string) (mode string, ok bool) {
	config := false
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "proxy-mode":
			// A value given as "nftables,foo=bar" (one comma-separated
			// string) still names its mode before the comma.
			v, _, _ = strings.Cut(v, ",")
			mode = strings.ToLower(strings.TrimSpace(v))
		case "config":
			config = true
		}
	}
	switch {
	case mode != "":
		return mode, true
	case config:
		return "", false
	default:
		return ModeIPTables, true
	}
}

// RKE2ConfigArgs returns the kube-proxy-arg entries of RKE2's configuration
// under root: config.yaml, then each config.yaml.d/*.yaml and *.yml in name
// order, merged as RKE2 merges them (k3s pkg/configfilearg): a key replaces
// the value of earlier files, a key ending in "+" (kube-proxy-arg+) appends
// to it; a value is a list or one string. found is false when neither the
// file nor a drop-in exists.
func RKE2ConfigArgs(root hostfs.Root) (args []string, found bool, err error) {
	files := []string{}
	if _, err := root.Stat(RKE2ConfigFile); err == nil {
		files = append(files, RKE2ConfigFile)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	dir := RKE2ConfigFile + ".d"
	ents, err := root.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	n := 0
	for _, e := range ents {
		name := strings.ToLower(e.Name())
		if e.IsDir() || !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
			continue
		}
		if n++; n > rke2MaxDropIns {
			return nil, false, fmt.Errorf("%s: more than %d drop-ins", root.Path(dir), rke2MaxDropIns)
		}
		files = append(files, path.Join(dir, e.Name()))
	}
	if len(files) == 0 {
		return nil, false, nil
	}
	var vals []string
	set := false
	for _, f := range files {
		b, err := root.ReadFile(f, RKE2FileLimit)
		if err != nil {
			return nil, true, err
		}
		var doc map[string]any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, true, fmt.Errorf("parsing %s: %w", root.Path(f), err)
		}
		// A file may hold both keys; RKE2 applies them in file order, which
		// a map no longer has: the plain key first, then the appending one.
		if v, ok := doc[kubeProxyArgKey]; ok {
			vals, set = toArgs(v), true
		}
		if v, ok := doc[kubeProxyArgKey+"+"]; ok {
			if set {
				vals = append(vals, toArgs(v)...)
			} else {
				vals, set = toArgs(v), true
			}
		}
	}
	return vals, true, nil
}

// toArgs turns a config.yaml value (a list, or one scalar) into arguments.
func toArgs(v any) []string {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			out = append(out, fmt.Sprint(e))
		}
		return out
	default:
		if s := strings.TrimSpace(fmt.Sprint(x)); s != "" {
			return []string{s}
		}
		return nil
	}
}

// ManifestArgs returns the command and args of the kube-proxy container of
// a static pod manifest (RKE2 renders "command: [kube-proxy, --flag=…]").
func ManifestArgs(b []byte) ([]string, error) {
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return nil, fmt.Errorf("parsing the kube-proxy manifest: %w", err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "kube-proxy" || len(pod.Spec.Containers) == 1 {
			return append(append([]string{}, c.Command...), c.Args...), nil
		}
	}
	return nil, errors.New("the kube-proxy manifest has no kube-proxy container")
}

// RKE2Mode is the mode source of an RKE2 node: the kube-proxy static pod
// RKE2 rendered (what the kubelet runs) and RKE2's configuration (what it
// renders at its next start), both read under root. They must agree: a
// configuration changed since RKE2's last start tells nothing until RKE2
// renders it.
func RKE2Mode(root hostfs.Root) ModeSource {
	return ModeSource{Name: SourceNodeConfig, Read: func(context.Context) (Evidence, error) {
		var manMode, cfgMode string
		b, err := root.ReadFile(RKE2KubeProxyManifest, RKE2FileLimit)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return Evidence{}, err
		default:
			args, err := ManifestArgs(b)
			if err != nil {
				return Evidence{}, fmt.Errorf("%s: %w", root.Path(RKE2KubeProxyManifest), err)
			}
			if m, ok := ModeFromArgs(args); ok {
				manMode = m
			} else {
				return Evidence{}, fmt.Errorf("%s starts kube-proxy with --config and no --proxy-mode", root.Path(RKE2KubeProxyManifest))
			}
		}
		args, found, err := RKE2ConfigArgs(root)
		if err != nil {
			return Evidence{}, err
		}
		if found {
			if m, ok := ModeFromArgs(args); ok {
				cfgMode = m
			} else {
				return Evidence{}, fmt.Errorf("%s gives kube-proxy a --config file and no proxy-mode", root.Path(RKE2ConfigFile))
			}
		}
		switch {
		case manMode == "" && !found:
			return Evidence{Detail: "no RKE2 config.yaml or kube-proxy static pod"}, nil
		case manMode == "":
			return Evidence{Mode: cfgMode, Detail: fmt.Sprintf("%s (kube-proxy-arg)", root.Path(RKE2ConfigFile))}, nil
		case !found:
			return Evidence{Mode: manMode, Detail: root.Path(RKE2KubeProxyManifest)}, nil
		case manMode != cfgMode:
			return Evidence{}, fmt.Errorf("%s says %s mode but %s says %s mode (RKE2 not restarted since the change?)",
				root.Path(RKE2KubeProxyManifest), manMode, root.Path(RKE2ConfigFile), cfgMode)
		default:
			return Evidence{Mode: manMode, Detail: fmt.Sprintf("%s and %s", root.Path(RKE2ConfigFile), root.Path(RKE2KubeProxyManifest))}, nil
		}
	}}
}

// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// KubeconfigLimit bounds a kubeconfig read: real ones are a few KiB (a
// handful of embedded certificates); 4 MiB is far above any.
var KubeconfigLimit = hostfs.Limit{Kind: "a kubeconfig", Max: 4 << 20}

// RESTConfigFromKubeconfig returns the client configuration of the
// kubeconfig at path, as clientcmd.BuildConfigFromFlags("", path) would,
// but reads the file itself: only a regular file, at most KubeconfigLimit
// (clientcmd reads whatever the path names to its end, so a named pipe
// hangs and /dev/zero exhausts memory). Relative paths in the file
// (certificate-authority, client-certificate, tokenFile...) are relative to
// its directory, as clientcmd makes them.
func RESTConfigFromKubeconfig(path string) (*rest.Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	b, err := hostfs.Root{}.ReadFile(abs, KubeconfigLimit)
	if err != nil {
		return nil, err // names the path and why
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return nil, fmt.Errorf("parsing kubeconfig %s: %w", path, err)
	}
	for _, c := range cfg.Clusters {
		c.LocationOfOrigin = abs
	}
	for _, a := range cfg.AuthInfos {
		a.LocationOfOrigin = abs
	}
	for _, c := range cfg.Contexts {
		c.LocationOfOrigin = abs
	}
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return rc, nil
}

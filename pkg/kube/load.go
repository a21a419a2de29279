// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
)

// ErrNoConfig: no kubeconfig was named (--kubeconfig, $KUBECONFIG) and the
// process does not run in a pod (KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT unset, or no service-account token mounted).
var ErrNoConfig = errors.New("no kubeconfig: neither --kubeconfig nor $KUBECONFIG is set, and not in a pod with a service-account token")

// Origin says where a client configuration came from, for messages.
type Origin struct {
	// Kind is "--kubeconfig", "$KUBECONFIG" or "in-cluster".
	Kind string
	// Path is the kubeconfig file (empty in-cluster).
	Path string
}

// String names the origin: `--kubeconfig /x`, `$KUBECONFIG /x`, `in-cluster`.
func (o Origin) String() string {
	if o.Path == "" {
		return o.Kind
	}
	return o.Kind + " " + o.Path
}

// Loader finds the client configuration by kubectl's and client-go's
// loading rules (clientcmd.BuildConfigFromFlags): an explicit kubeconfig,
// else the first file of $KUBECONFIG (a list, as kubectl reads it) that
// exists, else the pod's service account (rest.InClusterConfig, when
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are set). Unlike
// kubectl it never reads ~/.kube/config on its own: `sudo ipvs-guard
// diagnose` on a node reads the cluster only when told to. The zero value
// reads the process's environment and its mounted service account.
type Loader struct {
	// Getenv reads an environment variable; nil is os.Getenv.
	Getenv func(string) string
	// InCluster returns the pod's configuration; nil is rest.InClusterConfig
	// (the token and CA at /var/run/secrets/kubernetes.io/serviceaccount).
	InCluster func() (*rest.Config, error)
}

// Load returns the configuration explicit (--kubeconfig) or the
// environment names and where it came from. Without any it returns
// ErrNoConfig; a named kubeconfig that cannot be used is an error naming
// it (RESTConfigFromKubeconfig), never a fallback to the next rule.
func (l Loader) Load(explicit string) (*rest.Config, Origin, error) {
	getenv := l.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if explicit != "" {
		o := Origin{Kind: "--kubeconfig", Path: explicit}
		cfg, err := RESTConfigFromKubeconfig(explicit)
		return cfg, o, err
	}
	if env := getenv("KUBECONFIG"); env != "" {
		for _, p := range filepath.SplitList(env) {
			if p == "" {
				continue
			}
			// kubectl skips a listed file that does not exist; anything
			// else (a directory, a pipe) is the reader's error.
			if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
				continue
			}
			o := Origin{Kind: "$KUBECONFIG", Path: p}
			cfg, err := RESTConfigFromKubeconfig(p)
			return cfg, o, err
		}
	}
	if getenv("KUBERNETES_SERVICE_HOST") == "" || getenv("KUBERNETES_SERVICE_PORT") == "" {
		return nil, Origin{}, ErrNoConfig
	}
	inCluster := l.InCluster
	if inCluster == nil {
		inCluster = rest.InClusterConfig
	}
	o := Origin{Kind: "in-cluster"}
	cfg, err := inCluster()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A pod without a mounted token (automountServiceAccountToken:
		// false) has no identity to read the cluster with.
		return nil, o, fmt.Errorf("%w (%w)", ErrNoConfig, err)
	case err != nil:
		return nil, o, fmt.Errorf("in-cluster configuration: %w", err)
	}
	return cfg, o, nil
}

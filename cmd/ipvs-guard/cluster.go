// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// clusterConfig returns the API client configuration kubeconfig
// (--kubeconfig), else $KUBECONFIG, else the pod's service account names
// (kube.Loader), with a kube.Guard bounding every answer, and where it came
// from. A named kubeconfig that cannot be used is a usage error; with
// nothing to use the error is kube.ErrNoConfig.
func clusterConfig(kubeconfig string) (*rest.Config, kube.Origin, *kube.Guard, error) {
	cfg, origin, err := kube.Loader{}.Load(kubeconfig)
	switch {
	case errors.Is(err, kube.ErrNoConfig):
		return nil, origin, nil, err
	case err != nil && origin.Path != "":
		return nil, origin, nil, usageError{fmt.Errorf("%s: %w", origin.Kind, err)}
	case err != nil:
		return nil, origin, nil, err
	}
	g := kube.NewGuard()
	g.Install(cfg)
	return cfg, origin, g, nil
}

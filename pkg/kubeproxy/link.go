// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import "net/netip"

// DummyInterface is the dummy interface kube-proxy's IPVS mode binds every
// Service and LoadBalancer IP to.
const DummyInterface = "kube-ipvs0"

// Link is what is known of an interface.
type Link struct {
	// Name is the interface name.
	Name string
	// Exists is false when no interface has that name.
	Exists bool
	// Addrs are the interface's addresses.
	Addrs []netip.Addr
}

// LinkReader reads an interface by name (a seam; ReadLink is the real one).
type LinkReader func(name string) (Link, error)

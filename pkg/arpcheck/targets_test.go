// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"errors"
	"net/netip"
	"testing"
)

func TestCheckTargets(t *testing.T) {
	local := LocalInterfaces{
		"lo":   {netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")},
		"eth0": {netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")},
		"p2p":  {netip.MustParsePrefix("198.51.100.0/31")},
	}
	tests := []struct {
		name    string
		ip      string
		iface   string
		wantErr error
	}{
		{"a peer", "192.0.2.20", "", nil},
		{"own address", "192.0.2.10", "", ErrUnprobeable},
		{"network address", "192.0.2.0", "", ErrUnprobeable},
		{"broadcast", "192.0.2.255", "", ErrUnprobeable},
		{"loopback own", "127.0.0.1", "", ErrUnprobeable},
		{"/31 peer is a host", "198.51.100.1", "", nil},
		{"/31 own", "198.51.100.0", "", ErrUnprobeable},
		{"IPv6 own", "2001:db8::10", "", ErrUnprobeable},
		{"IPv6 subnet-router anycast", "2001:db8::", "", ErrUnprobeable},
		{"IPv6 peer", "2001:db8::20", "", nil},
		{"off-subnet", "203.0.113.5", "", nil},
		{"missing interface", "192.0.2.20", "nonexistent0", ErrNoInterface},
		{"existing interface", "192.0.2.20", "eth0", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTargets([]Target{{IP: netip.MustParseAddr(tt.ip)}}, tt.iface, local)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("CheckTargets(%s, %q) = %v, want %v", tt.ip, tt.iface, err, tt.wantErr)
			}
		})
	}
	if err := CheckTargets(nil, "nonexistent0", local); !errors.Is(err, ErrNoInterface) {
		t.Errorf("an unknown --interface without probe IPs: %v, want ErrNoInterface", err)
	}
}

func TestHostInterfacesHasLoopback(t *testing.T) {
	local, err := HostInterfaces()
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckTargets([]Target{{IP: netip.MustParseAddr("127.0.0.1")}}, "lo", local); !errors.Is(err, ErrUnprobeable) {
		t.Errorf("127.0.0.1 on this host: %v, want ErrUnprobeable (interfaces %v)", err, local)
	}
}

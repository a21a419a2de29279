// SPDX-License-Identifier: Apache-2.0

package nodestatus

import (
	"maps"
	"net"
	"testing"
)

func TestDownMACs(t *testing.T) {
	hw := func(s string) net.HardwareAddr {
		m, err := net.ParseMAC(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ifaces := []net.Interface{
		{Name: "lo", Flags: net.FlagLoopback},
		{Name: "eth0", HardwareAddr: hw("02:00:00:00:00:01"), Flags: net.FlagUp | net.FlagRunning},
		{Name: "eth1", HardwareAddr: hw("02:00:00:00:00:02")},
		{Name: "eth2", HardwareAddr: hw("02:00:00:00:00:03"), Flags: net.FlagUp},
		{Name: "kube-ipvs0", HardwareAddr: hw("02:00:00:00:00:04")},
		{Name: "ib0", HardwareAddr: make(net.HardwareAddr, 20)},
	}
	want := map[string]string{"eth1": "02:00:00:00:00:02", "eth2": "02:00:00:00:00:03"}
	if got := downMACs(ifaces); !maps.Equal(got, want) {
		t.Errorf("got %v, want %v (admin down, or up without carrier)", got, want)
	}
}

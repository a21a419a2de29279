// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ipvs

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

func TestFromMobyService(t *testing.T) {
	tests := []struct {
		name    string
		in      *mobyipvs.Service
		want    VirtualServer
		wantErr bool
	}{
		{
			name: "ipv4 tcp as netlink returns it (4-byte address)",
			in:   &mobyipvs.Service{Address: net.IP{10, 96, 0, 1}, AddressFamily: syscall.AF_INET, Protocol: 6, Port: 443, SchedName: "rr", Flags: 0x2, Netmask: 0xffffffff},
			want: VirtualServer{Address: netip.MustParseAddr("10.96.0.1"), Protocol: TCP, Port: 443, Scheduler: "rr", Flags: FlagHashed, Netmask: 0xffffffff},
		},
		{
			name: "ipv6 sctp persistent",
			in:   &mobyipvs.Service{Address: net.ParseIP("fd00::10"), AddressFamily: syscall.AF_INET6, Protocol: 132, Port: 9000, SchedName: "sh", Flags: 0x1 | 0x10, Timeout: 300, Netmask: 128},
			want: VirtualServer{Address: netip.MustParseAddr("fd00::10"), Protocol: SCTP, Port: 9000, Scheduler: "sh", Flags: FlagPersistent | FlagSched2, Timeout: 300, Netmask: 128},
		},
		{
			name: "firewall mark service",
			in:   &mobyipvs.Service{AddressFamily: syscall.AF_INET, FWMark: 7, SchedName: "wrr"},
			want: VirtualServer{FWMark: 7, Scheduler: "wrr"},
		},
		{
			name:    "unknown family",
			in:      &mobyipvs.Service{Address: net.IP{1, 2, 3, 4}, AddressFamily: 99, Port: 1},
			wantErr: true,
		},
		{
			name:    "nil",
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fromMobyService(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestFromMobyDestination(t *testing.T) {
	tests := []struct {
		name    string
		in      *mobyipvs.Destination
		want    RealServer
		wantErr bool
	}{
		{
			name: "masq with counters",
			in:   &mobyipvs.Destination{Address: net.IP{10, 244, 1, 11}, AddressFamily: syscall.AF_INET, Port: 8080, Weight: 1, ActiveConnections: 3, InactiveConnections: 1},
			want: RealServer{Address: netip.MustParseAddr("10.244.1.11"), Port: 8080, Weight: 1, Forward: Masquerade, ActiveConn: 3, InactiveConn: 1},
		},
		{
			name: "direct route keeps only the forwarding bits",
			in:   &mobyipvs.Destination{Address: net.ParseIP("fd00::2"), AddressFamily: syscall.AF_INET6, Port: 80, Weight: 5, ConnectionFlags: 0x0100 | mobyipvs.ConnectionFlagDirectRoute},
			want: RealServer{Address: netip.MustParseAddr("fd00::2"), Port: 80, Weight: 5, Forward: DirectRoute},
		},
		{
			name:    "ipv6 family with a short address",
			in:      &mobyipvs.Destination{Address: net.IP{1, 2, 3, 4}, AddressFamily: syscall.AF_INET6, Port: 80},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fromMobyDestination(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTableModuleNotLoadedNeverTouchesNetlink(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "proc/modules"), "nf_conntrack 188416 0 - Live 0x0000000000000000\n")
	h := New(hostfs.New(dir))
	h.families = func(string) (map[string]int, error) {
		t.Fatal("netlink must not be touched while ip_vs is not loaded")
		return nil, nil
	}
	_, err := h.Table(context.Background())
	if !errors.Is(err, ErrModuleNotLoaded) {
		t.Fatalf("err = %v, want ErrModuleNotLoaded", err)
	}
}

func TestTableFamilyNotRegistered(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "proc/modules"), "ip_vs 188416 0 - Live 0x0000000000000000\n")
	h := New(hostfs.New(dir))
	h.families = func(string) (map[string]int, error) { return map[string]int{"nlctrl": 16}, nil }
	_, err := h.Table(context.Background())
	if !errors.Is(err, ErrModuleNotLoaded) {
		t.Fatalf("err = %v, want ErrModuleNotLoaded", err)
	}
}

func TestModuleLoaded(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{name: "sysfs dir", files: map[string]string{"sys/module/ip_vs/parameters/conn_tab_bits": "12\n"}, want: true},
		{name: "proc modules live", files: map[string]string{"proc/modules": "ip_vs_rr 12288 1 - Live 0x0\nip_vs 188416 1 ip_vs_rr, Live 0x0\n"}, want: true},
		{name: "proc modules loading", files: map[string]string{"proc/modules": "ip_vs 188416 0 - Loading 0x0\n"}, want: false},
		{name: "only ip_vs_rr", files: map[string]string{"proc/modules": "ip_vs_rr 12288 0 - Live 0x0\n"}, want: false},
		{name: "nothing", files: map[string]string{}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, c := range tc.files {
				writeFile(t, filepath.Join(dir, p), c)
			}
			got, err := ModuleLoaded(hostfs.New(dir))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ModuleLoaded = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMobyTrapsDisarmed proves, in fresh processes, that moby/ipvs's first
// New execs `modprobe` (the trap is real, and the linkname reaches the same
// sync.Once) and that after New from this package it does not.
func TestMobyTrapsDisarmed(t *testing.T) {
	if mode := os.Getenv("IPVS_GUARD_MOBY_HELPER"); mode != "" {
		if mode == "disarmed" {
			New(hostfs.New("/"))
		}
		h, err := mobyipvs.New("")
		if err == nil {
			h.Close()
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode      string
		wantExecd bool
	}{{"armed", true}, {"disarmed", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			bin := t.TempDir()
			marker := filepath.Join(t.TempDir(), "modprobe-ran")
			writeFile(t, filepath.Join(bin, "modprobe"), "#!/bin/sh\necho \"$@\" > "+marker+"\n")
			if err := os.Chmod(filepath.Join(bin, "modprobe"), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, "-test.run=^TestMobyTrapsDisarmed$")
			cmd.Env = append(os.Environ(), "PATH="+bin, "IPVS_GUARD_MOBY_HELPER="+tc.mode)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			args, err := os.ReadFile(marker)
			execd := err == nil
			if execd != tc.wantExecd {
				t.Fatalf("modprobe executed = %v (args %q), want %v", execd, args, tc.wantExecd)
			}
			if execd && string(args) != "-va ip_vs\n" {
				t.Errorf("modprobe args = %q, want %q", args, "-va ip_vs\n")
			}
		})
	}
}

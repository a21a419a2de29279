// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDiagnoseJSONErrors: with -o json, a run that stops before any check
// (a usage error, an unreadable --kubeconfig) still prints one JSON object
// on stdout, the report's shape with "error" (and "usage" for a usage
// error), and exits 2; without -o json stdout stays empty.
func TestDiagnoseJSONErrors(t *testing.T) {
	root := copyTestTree(t, "debian12")
	tests := []struct {
		name      string
		args      []string
		wantJSON  bool
		wantUsage bool
		wantErr   string
	}{
		{"bad scheduler", []string{"-o", "json", "--scheduler", "rr;x"}, true, true, "--scheduler"},
		{"unknown flag before -o", []string{"--bogus", "-o", "json"}, true, true, "unknown flag: --bogus"},
		{"unknown flag after --output=json", []string{"--output=json", "--bogus"}, true, true, "unknown flag: --bogus"},
		{"flag without its value", []string{"-ojson", "--scheduler"}, true, true, "flag needs an argument"},
		{"a positional argument", []string{"-o=json", "extra"}, true, true, `unknown command "extra"`},
		{"multicast probe IP", []string{"-o", "json", "--probe-ip", "224.0.0.1"}, true, true, "--probe-ip"},
		{"kubeconfig is a device", []string{"-o", "json", "--root", root, "--kubeconfig", "/dev/zero"}, true, true, "character device"},
		{"kubeconfig is a directory", []string{"-o", "json", "--root", root, "--kubeconfig", root}, true, true, "--kubeconfig"},
		{"empty root", []string{"-o", "json", "--root", ""}, true, true, "--root is empty"},
		{"probe IP in 0.0.0.0/8", []string{"-o", "json", "--root", root, "--probe-ip", "0.0.0.1"}, true, true, "0.0.0.0/8"},
		{"no such interface", []string{"-o", "json", "--root", root, "--interface", "nosuch0"}, true, true, "--interface"},
		{"this node's own address", []string{"-o", "json", "--root", root, "--probe-ip", ownAddress(t)}, true, true, "an address of this node"},
		{"text output", []string{"--scheduler", "rr;x"}, false, false, ""},
		{"unknown output format", []string{"-o", "yaml"}, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"diagnose", "--node-name", "node-a"}, tt.args...)
			if code := executeTo(context.Background(), args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.HasPrefix(stderr.String(), "error: ") {
				t.Errorf("stderr %q, want the error", stderr.String())
			}
			if !tt.wantJSON {
				if stdout.Len() != 0 {
					t.Errorf("stdout %q, want nothing", stdout.String())
				}
				return
			}
			dec := json.NewDecoder(&stdout)
			var got map[string]any
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
			}
			if dec.More() {
				t.Errorf("stdout holds more than one JSON value")
			}
			msg, _ := got["error"].(string)
			if !strings.Contains(msg, tt.wantErr) {
				t.Errorf("error %q, want it to contain %q", msg, tt.wantErr)
			}
			delete(got, "error")
			want := map[string]any{"healthy": false, "node": "node-a", "kernel": "", "checks": []any{}}
			if tt.wantUsage {
				want["usage"] = true
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

// ownAddress returns a unicast address of one of this host's interfaces
// (not loopback).
func ownAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() && p.Addr().Is4() {
			return p.Addr().String()
		}
	}
	t.Fatal("this host has no IPv4 address but loopback")
	return ""
}

func TestFlagValue(t *testing.T) {
	tests := []struct {
		args   []string
		want   string
		wantOK bool
	}{
		{[]string{"-o", "json"}, "json", true},
		{[]string{"-ojson"}, "json", true},
		{[]string{"-o=json"}, "json", true},
		{[]string{"--output", "json"}, "json", true},
		{[]string{"--output=json"}, "json", true},
		{[]string{"-o", "json", "--output", "text"}, "text", true},
		{[]string{"--", "-o", "json"}, "", false},
		{[]string{"-o"}, "", false},
		{[]string{"--outputs=json"}, "", false},
		{nil, "", false},
	}
	for _, tt := range tests {
		if got, ok := flagValue(tt.args, "output", "o"); got != tt.want || ok != tt.wantOK {
			t.Errorf("flagValue(%q) = %q, %t; want %q, %t", tt.args, got, ok, tt.want, tt.wantOK)
		}
	}
}

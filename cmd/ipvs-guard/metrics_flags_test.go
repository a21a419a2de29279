// SPDX-License-Identifier: Apache-2.0

package main

import "testing"

func TestBindAddress(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "0", want: "0"},
		{in: ":9473", want: ":9473"},
		{in: "10.0.0.1:9473", want: "10.0.0.1:9473"},
		{in: "[fd00::1]:9473", want: "[fd00::1]:9473"},
		{in: "fd00::1:9473", want: "[fd00::1]:9473"}, // $(HOST_IP):9473 on an IPv6 node
		{in: "::9473", bad: true},                    // the address ::9473, no port
		{in: "9473", bad: true},
		{in: "10.0.0.1", bad: true},
		{in: "fd00::1:99999", bad: true},
		{in: "$(HOST_IP):9473", want: "$(HOST_IP):9473"}, // net.Listen names it
	}
	for _, tt := range tests {
		got, err := bindAddress(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("bindAddress(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func TestMetricsOptionsValidate(t *testing.T) {
	tests := []struct {
		name   string
		m      metricsOptions
		health string
		bad    bool
	}{
		{"secure, own address", metricsOptions{addr: ":9473", secure: true}, ":9474", false},
		{"secure, health's address", metricsOptions{addr: ":9474", secure: true}, ":9474", true},
		{"plain, health's address", metricsOptions{addr: ":9474"}, ":9474", false},
		{"disabled", metricsOptions{addr: "0", secure: true}, "0", false},
		{"cert without key", metricsOptions{addr: ":9473", secure: true, certFile: "c"}, ":9474", true},
		{"key without cert", metricsOptions{addr: ":9473", secure: true, keyFile: "k"}, ":9474", true},
		{"cert on plain HTTP", metricsOptions{addr: ":9473", certFile: "c", keyFile: "k"}, ":9474", true},
		{"bad health address", metricsOptions{addr: ":9473", secure: true}, "9474", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.health
			err := tt.m.validate(&h)
			if (err != nil) != tt.bad {
				t.Errorf("validate = %v, want error %v", err, tt.bad)
			}
			if err != nil {
				if _, ok := err.(usageError); !ok {
					t.Errorf("%v is not a usage error", err)
				}
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValidateAddress(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:10249", true},
		{"[::1]:10249", true},
		{"localhost:10249", true},
		{"127.0.0.1", false},
		{"127.0.0.1:", false},
		{":10249", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:65536", false},
		{"127.0.0.1:http", false},
		{"user@host:80", false},
		{"host/path:80", false},
	}
	for _, tt := range tests {
		if err := ValidateAddress(tt.addr); (err == nil) != tt.ok {
			t.Errorf("ValidateAddress(%q) = %v, want ok %v", tt.addr, err, tt.ok)
		}
	}
}

func TestAnswersAreBoundedAndRedirectsNotFollowed(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ipvs"))
	}))
	defer other.Close()
	var self string
	kp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/proxyMode":
			w.Write([]byte(strings.Repeat("i", 8<<20)))
		case "/configz":
			w.Write([]byte("{" + strings.Repeat(" ", 8<<20) + "}"))
		case "/metrics":
			http.Redirect(w, r, other.URL+"/proxyMode", http.StatusFound)
		case "/same":
			http.Redirect(w, r, "http://"+self+"/ok", http.StatusFound)
		case "/ok":
			w.Write([]byte("fine"))
		}
	}))
	defer kp.Close()
	self = strings.TrimPrefix(kp.URL, "http://")
	c := NewClient(self, 0)
	ctx := context.Background()
	if _, err := c.ProxyMode(ctx); !errors.Is(err, ErrTooLarge) {
		t.Errorf("8 MiB /proxyMode: %v, want ErrTooLarge", err)
	}
	if _, err := c.Configz(ctx); !errors.Is(err, ErrTooLarge) {
		t.Errorf("8 MiB /configz: %v, want ErrTooLarge", err)
	}
	if _, err := c.Version(ctx); !errors.Is(err, ErrRedirect) {
		t.Errorf("redirect off the address: %v, want ErrRedirect", err)
	}
	if b, err := c.get(ctx, "/same", 1<<10); err != nil || string(b) != "fine" {
		t.Errorf("redirect on the same address = %q, %v", b, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRunServesMetricsOverHTTPS runs `ipvs-guard run` with the metrics
// defaults (--metrics-secure) against a real API server: /metrics answers
// over HTTPS only, 401 without a token, 200 with a token the API server
// authenticates and authorizes (the admin's), and serves nothing else.
func TestRunServesMetricsOverHTTPS(t *testing.T) {
	s, _, root, health := startRunFixture(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()
	runCtx, stop := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		code <- execute(runCtx, []string{"run", "--kubeconfig", s.Kubeconfig, "--node-name", "node-a", "--root", root,
			"--health-probe-bind-address", health, "--metrics-bind-address", metricsAddr, "--resync-period", "2s"})
	}()
	defer func() {
		stop()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("exit code %d, want 0", c)
			}
		case <-time.After(5 * time.Second):
			t.Error("run did not stop within 5 s")
		}
	}()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the agent's self-signed certificate
	get := func(url, token string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, _, err := get("https://"+metricsAddr+"/metrics", s.AdminToken)
		if err == nil && c == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HTTPS /metrics never answered 200: %d %v", c, err)
		}
		select {
		case c := <-code:
			t.Fatalf("run exited early with %d", c)
		case <-time.After(100 * time.Millisecond):
		}
	}
	tests := []struct {
		name, url, token string
		want             int
		body             string
	}{
		{"authorized", "https://" + metricsAddr + "/metrics", s.AdminToken, http.StatusOK, "ipvs_guard_reconcile_total{"},
		{"no token", "https://" + metricsAddr + "/metrics", "", http.StatusUnauthorized, "Unauthorized"},
		{"unknown token", "https://" + metricsAddr + "/metrics", "nope", http.StatusUnauthorized, "Unauthorized"},
		{"plain HTTP", "http://" + metricsAddr + "/metrics", s.AdminToken, http.StatusBadRequest, ""},
		{"no probes on the metrics port", "https://" + metricsAddr + "/healthz", s.AdminToken, http.StatusNotFound, ""},
		{"probes on the health port, plain HTTP", "http://" + health + "/healthz", "", http.StatusOK, "ok"},
		{"no metrics on the health port", "http://" + health + "/metrics", "", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, body, err := get(tt.url, tt.token)
			if err != nil {
				t.Fatal(err)
			}
			if c != tt.want || !strings.Contains(body, tt.body) {
				t.Errorf("GET %s = %d %.200q, want %d with %q", tt.url, c, body, tt.want, tt.body)
			}
		})
	}
}

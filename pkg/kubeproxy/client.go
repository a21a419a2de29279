// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// DefaultMetricsAddress is kube-proxy's default --metrics-bind-address.
const DefaultMetricsAddress = "127.0.0.1:10249"

// DefaultTimeout bounds each request to kube-proxy's metrics port.
const DefaultTimeout = 2 * time.Second

// ErrUnreachable wraps errors of a metrics port that refuses connections
// (kube-proxy not running, or serving elsewhere): there is nothing to look at.
var ErrUnreachable = errors.New("kube-proxy metrics port refuses connections")

// maxBody bounds what is read from kube-proxy.
const maxBody = 8 << 20

// Client reads kube-proxy's metrics port.
type Client struct {
	address string
	http    *http.Client
}

// NewClient returns a Client for the metrics port at address (host:port,
// e.g. DefaultMetricsAddress); timeout bounds each request (0 means
// DefaultTimeout). It never uses a proxy from the environment.
func NewClient(address string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true, ResponseHeaderTimeout: timeout}
	return &Client{address: address, http: &http.Client{Timeout: timeout, Transport: tr}}
}

// Address returns the metrics address the client reads.
func (c *Client) Address() string { return c.address }

func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	url := "http://" + c.address + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building request for %s: %w", url, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("GET %s: %w: %w", url, ErrUnreachable, err)
		}
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading body: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(firstLine(body))))
	}
	return body, nil
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return b
}

// ProxyMode returns the mode kube-proxy actually runs in (GET /proxyMode).
func (c *Client) ProxyMode(ctx context.Context) (string, error) {
	b, err := c.get(ctx, "/proxyMode")
	if err != nil {
		return "", err
	}
	mode := strings.TrimSpace(string(b))
	if mode == "" || strings.ContainsAny(mode, " \t\n<>{") {
		return "", fmt.Errorf("GET /proxyMode: unexpected body %q", firstLine(b))
	}
	return mode, nil
}

// Configz returns kube-proxy's effective configuration (GET /configz).
func (c *Client) Configz(ctx context.Context) (Config, error) {
	b, err := c.get(ctx, "/configz")
	if err != nil {
		return Config{}, err
	}
	return ParseConfigz(b)
}

// Version returns kube-proxy's version from kubernetes_build_info on /metrics.
func (c *Client) Version(ctx context.Context) (Version, error) {
	b, err := c.get(ctx, "/metrics")
	if err != nil {
		return Version{}, err
	}
	return ParseBuildInfo(bytes.NewReader(b))
}

// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMetricsAddress is kube-proxy's default --metrics-bind-address.
const DefaultMetricsAddress = "127.0.0.1:10249"

// DefaultTimeout bounds each request to kube-proxy's metrics port.
const DefaultTimeout = 2 * time.Second

// ErrUnreachable wraps errors of a metrics port that refuses connections
// (kube-proxy not running, or serving elsewhere) or resets or closes the one
// a request is on before answering (kube-proxy going away: a restart, a
// mode switch): there is nothing to look at.
var ErrUnreachable = errors.New("kube-proxy metrics port refuses connections")

// Limits of kube-proxy's answers, far above real ones (/proxyMode is one
// word, /configz a few KiB, /metrics a few hundred KiB; 4 MiB for it): a larger answer is
// an error, never read whole.
const (
	maxProxyModeBody = 1 << 10
	maxConfigzBody   = 1 << 20
	maxMetricsBody   = 4 << 20
	maxHealthBody    = 64 << 10
)

// ErrRedirect: kube-proxy's metrics port redirected to another address,
// which is never followed.
var ErrRedirect = errors.New("redirect to another address not followed")

// ErrTooLarge: an answer is larger than its limit.
var ErrTooLarge = errors.New("answer too large")

// ValidateAddress checks a metrics address: host:port, the port a number
// from 1 to 65535, the host not empty. It is what --kube-proxy-metrics-address
// and kube-proxy's metricsBindAddress must be.
func ValidateAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("kube-proxy metrics address %q: want host:port (e.g. %s): %w", addr, DefaultMetricsAddress, err)
	}
	if host == "" {
		return fmt.Errorf("kube-proxy metrics address %q: no host (e.g. %s)", addr, DefaultMetricsAddress)
	}
	if strings.ContainsAny(host, "/?#@ \t") {
		return fmt.Errorf("kube-proxy metrics address %q: %q is not a host name or IP address", addr, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("kube-proxy metrics address %q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// ErrNotAnswering wraps the errors of requests not sent because an earlier
// one to the same metrics port timed out moments ago (see Client).
var ErrNotAnswering = errors.New("kube-proxy's metrics port did not answer")

// Client reads kube-proxy's metrics port. Safe for concurrent use.
//
// A kube-proxy that accepts connections and never answers costs one
// timeout, not one per read: after a request times out, the reads of the
// next few timeouts' worth of time (quietFactor × timeout) fail at once with
// ErrNotAnswering. The checks of one diagnose run (or of one agent pass)
// read the port several times within seconds; the next resync asks again.
type Client struct {
	address string
	http    *http.Client
	timeout time.Duration
	now     func() time.Time

	// mu guards quietUntil and quietErr: until quietUntil, get returns
	// quietErr (the timeout that started the quiet) without a request.
	mu         sync.Mutex
	quietUntil time.Time
	quietErr   error
}

// quietFactor × the request timeout is how long a timed-out metrics port is
// not asked again.
const quietFactor = 5

// NewClient returns a Client for the metrics port at address (host:port,
// e.g. DefaultMetricsAddress); timeout bounds each request (0 means
// DefaultTimeout). It never uses a proxy from the environment.
func NewClient(address string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true, ResponseHeaderTimeout: timeout}
	return &Client{address: address, timeout: timeout, now: time.Now, http: &http.Client{Timeout: timeout, Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "http" || req.URL.Host != address || len(via) >= 3 {
				return fmt.Errorf("%w: %s", ErrRedirect, req.URL.Redacted())
			}
			return nil
		}}}
}

// Address returns the metrics address the client reads.
func (c *Client) Address() string { return c.address }

func (c *Client) get(ctx context.Context, path string, maxBody int64) ([]byte, error) {
	body, code, err := c.do(ctx, path, maxBody)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET http://%s%s: HTTP %d: %s", c.address, path, code, strings.TrimSpace(string(firstLine(body))))
	}
	return body, nil
}

// do sends GET path and returns the body (at most maxBody bytes) and the
// HTTP status, whatever it is.
func (c *Client) do(ctx context.Context, path string, maxBody int64) ([]byte, int, error) {
	url := "http://" + c.address + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("building request for %s: %w", url, err)
	}
	if err := c.quiet(); err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", url, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if goingAway(err) {
			return nil, 0, fmt.Errorf("GET %s: %w: %w", url, ErrUnreachable, err)
		}
		c.noteTimeout(ctx, err)
		return nil, 0, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		c.noteTimeout(ctx, err)
		return nil, 0, fmt.Errorf("GET %s: reading body: %w", url, err)
	}
	if int64(len(body)) > maxBody {
		return nil, 0, fmt.Errorf("GET %s: %w: more than %d bytes", url, ErrTooLarge, maxBody)
	}
	return body, resp.StatusCode, nil
}

// goingAway reports whether a request's error says nothing listens at the
// address or the listener went away before answering: a refused
// connection, or one reset or closed before the response.
func goingAway(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// quiet returns the error to fail with while the port is not asked (a
// request timed out moments ago), else nil.
func (c *Client) quiet() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quietErr == nil || !c.now().Before(c.quietUntil) {
		return nil
	}
	return fmt.Errorf("%w: an earlier request timed out (not asked again until %s): %w", ErrNotAnswering, c.quietUntil.Format("15:04:05"), c.quietErr)
}

// noteTimeout starts a quiet period when err is the request's own timeout
// (not the caller's context ending: that says nothing about kube-proxy).
func (c *Client) noteTimeout(ctx context.Context, err error) {
	var ne net.Error
	if ctx.Err() != nil || !errors.As(err, &ne) || !ne.Timeout() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quietUntil, c.quietErr = c.now().Add(quietFactor*c.timeout), err
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
	b, err := c.get(ctx, "/proxyMode", maxProxyModeBody)
	if err != nil {
		return "", err
	}
	mode := strings.TrimSpace(string(b))
	if mode == "" || strings.ContainsAny(mode, " \t\n<>{") {
		return "", fmt.Errorf("GET /proxyMode: unexpected body %q", firstLine(b))
	}
	// kube-proxy answers its mode in lower case; "IPVS" is the same mode,
	// and every message compares and prints it in one case.
	return strings.ToLower(mode), nil
}

// Configz returns kube-proxy's effective configuration (GET /configz).
func (c *Client) Configz(ctx context.Context) (Config, error) {
	b, err := c.get(ctx, "/configz", maxConfigzBody)
	if err != nil {
		return Config{}, err
	}
	return ParseConfigz(b)
}

// Version returns kube-proxy's version from kubernetes_build_info on /metrics.
func (c *Client) Version(ctx context.Context) (Version, error) {
	b, err := c.get(ctx, "/metrics", maxMetricsBody)
	if err != nil {
		return Version{}, err
	}
	return ParseBuildInfo(bytes.NewReader(b))
}

// Metrics returns the body of kube-proxy's /metrics (at most 4 MiB).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	return c.get(ctx, "/metrics", maxMetricsBody)
}

// Health returns kube-proxy's answer on path (/healthz or /livez) of its
// healthz address: 200 and 503 both carry its verdict.
func (c *Client) Health(ctx context.Context, path string) (ProxyHealth, error) {
	b, code, err := c.do(ctx, path, maxHealthBody)
	if err != nil {
		return ProxyHealth{}, err
	}
	h, err := ParseProxyHealth(code, b)
	if err != nil {
		return ProxyHealth{}, fmt.Errorf("GET http://%s%s: %w", c.address, path, err)
	}
	return h, nil
}

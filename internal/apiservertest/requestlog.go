// SPDX-License-Identifier: Apache-2.0

package apiservertest

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// RequestLog records the requests a client sends, with their status, so a
// test can count what a component cost the API server.
type RequestLog struct {
	mu   sync.Mutex
	reqs []string // "METHOD path status"
	uris []string // "METHOD path?query"
}

// Wrap returns a copy of cfg whose requests l records.
func (l *RequestLog) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			code := "err"
			if err == nil {
				code = http.StatusText(resp.StatusCode)
			}
			l.mu.Lock()
			l.reqs = append(l.reqs, req.Method+" "+req.URL.Path+" "+code)
			l.uris = append(l.uris, req.Method+" "+req.URL.RequestURI())
			l.mu.Unlock()
			return resp, err
		})
	}
	return cfg
}

// Responses returns "METHOD path status" of every request so far.
func (l *RequestLog) Responses() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

// Writes returns "METHOD path status" of every request so far but GETs.
func (l *RequestLog) Writes() []string {
	var out []string
	for _, r := range l.Responses() {
		if !strings.HasPrefix(r, "GET ") {
			out = append(out, r)
		}
	}
	return out
}

// Requests returns "METHOD path?query" of every request so far whose path
// starts with prefix.
func (l *RequestLog) Requests(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, u := range l.uris {
		if _, p, _ := strings.Cut(u, " "); strings.HasPrefix(p, prefix) {
			out = append(out, u)
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// AgentClient returns the agent's own narrow client (pkg/kube) for cfg, as
// ipvs-guard run builds it: protobuf.
func AgentClient(t testing.TB, cfg *rest.Config) kube.Interface {
	t.Helper()
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kube.NewForConfig(pb)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package clusterview

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// requestLog counts the requests a client sends, by method, with status codes.
type requestLog struct {
	mu   sync.Mutex
	reqs []string // "METHOD path code"
	uris []string // "METHOD path?query"
}

func (l *requestLog) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(req *http.Request) (*http.Response, error) {
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

// requests returns "METHOD path?query" of every request so far whose path
// starts with prefix.
func (l *requestLog) requests(prefix string) []string {
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

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// mustKube returns the agent's own narrow client (pkg/kube) for cfg, as
// ipvs-guard run builds it: protobuf.
func mustKube(t *testing.T, cfg *rest.Config) kube.Interface {
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

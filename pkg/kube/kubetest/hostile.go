// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Hostile is an API server that answers every list without end, for
// tests of what a client reads from a broken or hostile server.
type Hostile struct {
	// URL is the server's address (https).
	URL string
	// Mode is how it answers (set before the first request).
	Mode HostileMode

	requests atomic.Int64
	written  atomic.Int64
}

// HostileMode is how a Hostile server answers.
type HostileMode int

const (
	// EndlessList streams one JSON list whose items never end (also to a
	// watch: one event that never ends).
	EndlessList HostileMode = iota
	// SameContinue answers every list with one item and the same continue
	// token.
	SameContinue
	// FreshContinue answers every list with a page of items and a new
	// continue token, without end.
	FreshContinue
)

// hostileItem is a Service as JSON, about 400 bytes.
const hostileItem = `{"metadata":{"name":"svc-%d","namespace":"default","uid":"0b6f3a8e-1c1e-4d6c-9d1f-%012d","resourceVersion":"1","labels":{"app":"hostile"}},` +
	`"spec":{"type":"LoadBalancer","clusterIP":"10.96.0.10","ports":[{"port":80,"protocol":"TCP","targetPort":8080}]},` +
	`"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}`

// NewHostile starts a Hostile server in mode, closed when t ends.
func NewHostile(t testing.TB, mode HostileMode) *Hostile {
	t.Helper()
	h := &Hostile{Mode: mode}
	srv := httptest.NewTLSServer(http.HandlerFunc(h.serve))
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// Requests is how many requests the server took.
func (h *Hostile) Requests() int64 { return h.requests.Load() }

// Written is how many body bytes the server wrote (a client reading less
// makes its writes fail once the connection's buffers are full).
func (h *Hostile) Written() int64 { return h.written.Load() }

func (h *Hostile) write(w http.ResponseWriter, s string) error {
	n, err := w.Write([]byte(s))
	h.written.Add(int64(n))
	return err
}

func (h *Hostile) serve(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	if !strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "s") || strings.HasPrefix(r.URL.Path, "/apis/metallb") {
		http.NotFound(w, r) // discovery, a named object
		return
	}
	w.Header().Set("Content-Type", "application/json")
	kind := "List"
	switch r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:] {
	case "services":
		kind = "ServiceList"
	case "nodes":
		kind = "NodeList"
	case "endpointslices":
		kind = "EndpointSliceList"
	}
	switch h.Mode {
	case SameContinue:
		_ = h.write(w, `{"kind":"`+kind+`","apiVersion":"v1","metadata":{"resourceVersion":"1","continue":"same"},"items":[`+fmt.Sprintf(hostileItem, 0, 0)+`]}`)
	case FreshContinue:
		var b strings.Builder
		b.WriteString(`{"kind":"` + kind + `","apiVersion":"v1","metadata":{"resourceVersion":"1","continue":"c` + fmt.Sprint(h.requests.Load()) + `"},"items":[`)
		for i := 0; i < 100; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, hostileItem, i, i)
		}
		b.WriteString("]}")
		_ = h.write(w, b.String())
	default:
		if h.write(w, `{"kind":"`+kind+`","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`) != nil {
			return
		}
		var chunk strings.Builder
		for i := 0; i < 64; i++ {
			fmt.Fprintf(&chunk, hostileItem+",", i, i)
		}
		for r.Context().Err() == nil {
			if h.write(w, chunk.String()) != nil {
				return
			}
		}
	}
}

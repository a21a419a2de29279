// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// TestRecorderWedgedAPIServer: an API server that accepts TLS and the
// request and never answers costs each Event its bounded tries, not every
// later Event: the Event given up on is dropped with a log line naming it,
// and the next one is written (tried) after it.
func TestRecorderWedgedAPIServer(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies []string
	)
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		select { // never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	cs, err := NewForConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 2})

	r := NewRecorder(cs, "ipvs-guard")
	r.writeTimeout = 200 * time.Millisecond
	r.retryAfter = time.Millisecond
	node := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-a", UID: types.UID("uid-a")}
	r.Eventf(node, nil, corev1.EventTypeWarning, "FirstTransition", "IPVSModulesMissing", "ip_vs is not loaded")
	r.Eventf(node, nil, corev1.EventTypeNormal, "SecondTransition", "IPVSModulesMissing", "all loaded")
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		var first, second int
		for _, b := range bodies {
			if strings.Contains(b, "FirstTransition") {
				first++
			}
			if strings.Contains(b, "SecondTransition") {
				second++
			}
		}
		l := logs.String()
		mu.Unlock()
		// Tried: it reached the server, or its write failed (a request
		// that timed out in the TLS handshake of a loaded machine).
		if second > 0 || strings.Contains(l, `"reason"="SecondTransition"`) {
			if first > eventTries {
				t.Errorf("the first Event was tried %d times, want at most %d", first, eventTries)
			}
			if !strings.Contains(l, `"msg"="Dropped an Event: could not write it"`) || !strings.Contains(l, `"reason"="FirstTransition"`) ||
				!strings.Contains(l, `"note"="ip_vs is not loaded"`) {
				t.Errorf("no log line says the first Event was dropped:\n%s", l)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second Event was never tried after 30 s (tries of the first: %d)\n%s", first, l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

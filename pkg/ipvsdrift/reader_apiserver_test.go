// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package ipvsdrift

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvscheck"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// listLog records the EndpointSlice requests a client sends and the bytes
// of their answers.
type listLog struct {
	mu    sync.Mutex
	uris  []string
	bytes int64
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (l *listLog) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			l.mu.Lock()
			l.uris = append(l.uris, req.Method+" "+req.URL.RequestURI())
			l.mu.Unlock()
			if err == nil {
				resp.Body = &countingBody{ReadCloser: resp.Body, l: l}
			}
			return resp, err
		})
	}
	return cfg
}

// countingBody adds what is read of a response body to its log's bytes.
type countingBody struct {
	io.ReadCloser
	l *listLog
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.l.mu.Lock()
	b.l.bytes += int64(n)
	b.l.mu.Unlock()
	return n, err
}

func (l *listLog) snapshot() ([]string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.uris...), l.bytes
}

// TestEndpointReaderAgainstAPIServer reads every proxied EndpointSlice from
// the real API server as the agent does for the full comparison: paged
// consistent LISTs (500 a page) with kube-proxy's label selector, headless and other proxies' slices left
// out, one full read per period whatever the number of calls, nothing
// watched; and the confirming re-read of named Services, 50 names a LIST.
func TestEndpointReaderAgainstAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	const n = 1100
	create := func(i int, labels map[string]string) error {
		name := fmt.Sprintf("svc-%04d", i)
		l := map[string]string{discoveryv1.LabelServiceName: name}
		for k, v := range labels {
			l[k] = v
		}
		_, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-x", Namespace: "default", Labels: l},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/200, i%200+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
				{Addresses: []string{fmt.Sprintf("10.245.%d.%d", i/200, i%200+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
				{Addresses: []string{fmt.Sprintf("10.246.%d.%d", i/200, i%200+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			},
		}, metav1.CreateOptions{})
		return err
	}
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if err := create(i, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := create(n, map[string]string{corev1.IsHeadlessService: ""}); err != nil {
		t.Fatal(err)
	}
	if err := create(n+1, map[string]string{ipvscheck.ServiceProxyNameLabel: "other"}); err != nil {
		t.Fatal(err)
	}

	var log listLog
	cs, err := kube.NewForConfig(log.wrap(s.AdminConfig()))
	if err != nil {
		t.Fatal(err)
	}
	r := NewEndpointReader(cs, FullComparisonPeriod)
	clk := testingclock.NewFakePassiveClock(time.Now())
	r.clock = clk
	start := time.Now()
	all, _, err := r.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if len(all) != n {
		t.Fatalf("read %d Services, want %d (headless and other proxy's left out)", len(all), n)
	}
	if got := all["default/svc-0007"]; len(got) != 1 || len(got[0].Endpoints) != 3 {
		t.Fatalf("default/svc-0007: %+v", got)
	}
	uris, bytes := log.snapshot()
	maxPages := (n + PageSize - 1) / PageSize
	if len(uris) != maxPages {
		t.Fatalf("%d requests for one full read of %d slices, want %d pages of %d: %v", len(uris), n, maxPages, PageSize, uris)
	}
	if strings.Contains(uris[0], "resourceVersion=") || !strings.Contains(uris[0], "limit=500") {
		t.Errorf("first page %s: want a consistent read (no resourceVersion) of 500", uris[0])
	}
	t.Logf("full read of %d EndpointSlices (3 endpoints each): %d LIST request(s), %d bytes, %v: %v", n, len(uris), bytes, took, uris)

	// The alternative: resourceVersion=0, which the API server also serves
	// from its watch cache, but in one answer whatever the limit.
	var clog listLog
	ccs, err := kube.NewForConfig(clog.wrap(s.AdminConfig()))
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{LabelSelector: ipvscheck.ProxiedEndpointSlices, Limit: PageSize, ResourceVersion: "0"}
	start = time.Now()
	for {
		l, err := ccs.EndpointSlices("").List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue, opts.ResourceVersion = l.Continue, ""
	}
	cu, cbytes := clog.snapshot()
	t.Logf("the same read with resourceVersion=0: %d LIST request(s), %d bytes, %v", len(cu), cbytes, time.Since(start))

	// Within the period, no request; after it, one full read again.
	for range 3 {
		if _, _, err := r.All(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if u, _ := log.snapshot(); len(u) != len(uris) {
		t.Fatalf("reads within the period sent %d more requests", len(u)-len(uris))
	}
	clk.SetTime(clk.Now().Add(FullComparisonPeriod))
	if _, _, err := r.All(ctx); err != nil {
		t.Fatal(err)
	}
	if u, _ := log.snapshot(); len(u) != 2*len(uris) {
		t.Fatalf("after the period: %d requests in all, want %d", len(u), 2*len(uris))
	}

	// A confirming re-read: 60 Services, 2 LISTs, each asked one present.
	var names []string
	for i := range 60 {
		names = append(names, fmt.Sprintf("default/svc-%04d", i))
	}
	before, _ := log.snapshot()
	got, err := r.Of(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := log.snapshot()
	if len(got) != 60 || len(after)-len(before) != 2 {
		t.Fatalf("re-read of 60 Services: %d Services in %d LISTs, want 60 in 2", len(got), len(after)-len(before))
	}
	if rd := r.Reads(); rd.Confirmations != 2 {
		t.Errorf("Reads() = %+v, want 2 confirmations", rd)
	}
	for _, u := range after {
		if strings.Contains(u, "watch=") {
			t.Errorf("watched: %s", u)
		}
	}
}

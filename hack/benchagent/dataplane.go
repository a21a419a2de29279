// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	goruntime "runtime"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// countingTransport counts a client's requests and the bytes of their
// answers.
type countingTransport struct {
	rt              http.RoundTripper
	requests, bytes atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	c.requests.Add(1)
	if err == nil {
		resp.Body = countingBody{resp.Body, &c.bytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// reportFullComparison measures, against the populated API server, the
// ipvs-dataplane check's full read of every proxied EndpointSlice as an
// agent with an IPVS table makes it every 5 minutes (the agents here run
// over host trees without one, so they make none), and states its reads per
// agent per hour against kube-proxy's S' + E' + 12 on the same node (E':
// three EndpointSlice changes per churned Service, created, scaled, deleted).
// In nftables mode the agents make this read themselves (the
// nftables-dataplane check shares the reader), and it is in their counted
// reads too.
func reportFullComparison(ctx context.Context, cfg *rest.Config, churnPerSecond float64, proxyMode string) error {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	ct := &countingTransport{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { ct.rt = rt; return ct }
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		return err
	}
	r := ipvsdrift.NewEndpointReader(cs, ipvsdrift.FullComparisonPeriod)
	var m0, m1, m2 goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&m0)
	t0 := time.Now()
	all, _, err := r.All(ctx)
	if err != nil {
		return fmt.Errorf("the full EndpointSlice read: %w", err)
	}
	took := time.Since(t0)
	goruntime.ReadMemStats(&m1)
	goruntime.GC()
	goruntime.ReadMemStats(&m2)
	kept := float64(int64(m2.HeapAlloc)-int64(m0.HeapAlloc)) / (1 << 20)
	goruntime.KeepAlive(all)
	reqs := float64(ct.requests.Load())
	ePrime := 3 * churnPerSecond * 3600
	fullPerHour := 12 * reqs
	confirmPerHour := 60 + math.Ceil(ePrime/50)
	if proxyMode == proxyModeNFTables {
		fmt.Printf("\nfull EndpointSlice read of the data-plane checks (every %s; in nftables mode the agents make it themselves: counted in their reads above):\n", ipvsdrift.FullComparisonPeriod)
	} else {
		fmt.Printf("\nipvs-dataplane full comparison (each agent with an IPVS table, every %s; these host trees have none):\n", ipvsdrift.FullComparisonPeriod)
	}
	fmt.Printf("  one full read (pages of %d): %d Services' EndpointSlices in %.0f LIST request(s), %.0f KiB, %s\n", ipvsdrift.PageSize, len(all), reqs, float64(ct.bytes.Load())/1024, took.Round(time.Millisecond))
	fmt.Printf("  agent memory for it: %.1f MiB allocated by the read (transient: the decoded list), %.1f MiB kept (the summary)\n",
		float64(m1.TotalAlloc-m0.TotalAlloc)/(1<<20), kept)
	fmt.Printf("  per agent per hour: full reads %.0f + confirming re-reads <= 60 + E'/50 = %.0f (E' = %.0f endpoint changes/h at this churn) => <= %.0f reads\n",
		fullPerHour, confirmPerHour, ePrime, fullPerHour+confirmPerHour)
	fmt.Printf("  kube-proxy on the same node receives S' + E' + 12: E' alone is %.0f; the full comparison adds %.1f%% of it\n", ePrime, 100*(fullPerHour+confirmPerHour)/math.Max(ePrime, 1))
	return nil
}

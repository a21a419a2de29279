// SPDX-License-Identifier: Apache-2.0

//go:build metallb && linux

package metallb

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-guard/ipvs-guard/internal/alerttest"
	"github.com/ipvs-guard/ipvs-guard/internal/ipvsguardtest"
)

// TestMetalLBMetricsHTTPS: every agent serves /metrics over HTTPS only to
// a scraper the API server authenticates and authorizes. The real
// Prometheus scrapes them all with its ServiceAccount token (bound to the
// shipped ipvs-guard-metrics-reader ClusterRole) and sees them up, with
// the agents' ARP series; a scrape without a token gets 401, one with a
// token of a ServiceAccount without the binding 403, one over plain HTTP
// no metrics.
func TestMetalLBMetricsHTTPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, []string{"a", "b"}, []string{"a"})
	c.startAlerting(alertFor)
	ip := c.service("web", corev1.ServiceExternalTrafficPolicyCluster, "a")
	t.Logf("MetalLB assigned %s", ip)

	took := c.waitFor("Prometheus scrapes every agent over HTTPS with its token", waitLong, func() (bool, string) {
		targets, err := c.alerts.Targets(ctx)
		if err != nil {
			return false, err.Error()
		}
		up := 0
		var why []string
		for _, tg := range targets {
			if !strings.HasPrefix(tg.ScrapeURL, "https://") {
				return false, "target " + tg.ScrapeURL + " is not HTTPS"
			}
			if tg.Health == "up" {
				up++
			} else {
				why = append(why, fmt.Sprintf("%s: %s %s", tg.ScrapeURL, tg.Health, tg.LastError))
			}
		}
		return up == len(c.order) && len(targets) == len(c.order), fmt.Sprintf("%d of %d targets up; %v", up, len(targets), why)
	})
	c.figure("metrics HTTPS: Prometheus sees every agent up", "%.1fs", took.Seconds())
	c.waitFor("Prometheus stores the agents' ARP series for "+ip.String(), waitLong, func() (bool, string) {
		n, err := c.alerts.Count(ctx, fmt.Sprintf(`ipvs_guard_arp_probe_result{job="ipvs-guard",ip=%q}`, ip.String()))
		return err == nil && n > 0, fmt.Sprintf("%d series, %v", n, err)
	})

	unbound := c.serviceAccountToken("monitoring", "grafana")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: ipvsguardtest.InsecureTLS()}}
	for _, n := range c.order {
		for _, tc := range []struct {
			what, url, token string
			want             int
		}{
			{"no token", c.metricsURL(n), "", http.StatusUnauthorized},
			{"a forged token", c.metricsURL(n), "forged", http.StatusUnauthorized},
			{"a ServiceAccount without the reader binding", c.metricsURL(n), unbound, http.StatusForbidden},
			{"plain HTTP", "http://" + net.JoinHostPort(c.ip(n).String(), fmt.Sprint(agentPort)) + "/metrics", c.scrapeToken, http.StatusBadRequest},
			{"Prometheus' token", c.metricsURL(n), c.scrapeToken, http.StatusOK},
		} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tc.url, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("node %s, %s: %v", n, tc.what, err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("node %s, %s: %s, want %d", n, tc.what, resp.Status, tc.want)
			} else {
				t.Logf("node %s, %s: %s", n, tc.what, resp.Status)
			}
		}
	}
	// The same refusals as Prometheus sees them: a job without the token.
	noToken := alerttest.Start(t, alerttest.Options{
		Rules: c.alerts.RulesFile, Targets: []alerttest.Target{{Node: "a", Address: net.JoinHostPort(c.ip("a").String(), fmt.Sprint(agentPort))}},
		Scheme: "https",
	})
	c.waitFor("Prometheus without a token: the agent refuses the scrape", waitLong, func() (bool, string) {
		targets, err := noToken.Targets(ctx)
		if err != nil || len(targets) != 1 {
			return false, fmt.Sprint(targets, err)
		}
		tg := targets[0]
		return tg.Health == "down" && strings.Contains(tg.LastError, "401"), tg.Health + " " + tg.LastError
	})
	c.printFigures()
}

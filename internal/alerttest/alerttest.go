// SPDX-License-Identifier: Apache-2.0

// Package alerttest runs Debian's Prometheus and Alertmanager on loopback
// for tests, the demo and benchmarks, with their own configuration and data
// directories (never the Debian services): Prometheus scrapes the given
// targets as job "ipvs-guard" with a node label each, as the chart's
// ServiceMonitor does, evaluates the chart's alert rules and sends to
// Alertmanager, which notifies a webhook receiver served by this package.
package alerttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ipvs-guard/ipvs-guard/internal/proc"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// Binaries are Debian's package binaries.
const (
	PrometheusBin   = "/usr/bin/prometheus"
	AlertmanagerBin = "/usr/bin/prometheus-alertmanager"
)

// Check reports whether both binaries are installed.
func Check() error {
	for _, b := range []string{PrometheusBin, AlertmanagerBin} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s missing (hack/metallb/install.sh installs prometheus and prometheus-alertmanager): %w", b, err)
		}
	}
	return nil
}

// Target is one agent to scrape.
type Target struct {
	// Node is the node label.
	Node string
	// Address is host:port of its /metrics.
	Address string
}

// Options configure a Stack.
type Options struct {
	// Dir holds configuration, data and logs.
	Dir string
	// Rules is the alert rules file (the chart's files/alerts.yaml).
	Rules string
	// For, when set, replaces every rule's `for:` duration (a test-time
	// rewrite of the rules, so alerts fire within a test's patience).
	For time.Duration
	// Interval is the scrape and rule evaluation interval (default 1s).
	Interval time.Duration
	// Targets are the agents.
	Targets []Target
	// Scheme is the agents' scheme: "https" scrapes with the token of
	// BearerTokenFile, without verifying the agents' self-signed
	// certificates (the chart's ServiceMonitor: scheme https,
	// bearerTokenFile, insecureSkipVerify); "" is plain HTTP.
	Scheme          string
	BearerTokenFile string
}

// Stack is a running Prometheus + Alertmanager + webhook receiver.
type Stack struct {
	// PrometheusURL and AlertmanagerURL are the servers' base URLs.
	PrometheusURL, AlertmanagerURL string
	// RulesFile is Options.Rules.
	RulesFile string
	// Prometheus and Alertmanager are the processes.
	Prometheus, Alertmanager *proc.Process

	hook *http.Server
	mu   sync.Mutex
	got  []Notification
}

// Alert is one alert of a webhook notification.
type Alert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}

// Notification is one webhook delivery (Alertmanager's webhook payload, version 4).
type Notification struct {
	// Received is when the receiver got it.
	Received time.Time `json:"-"`
	Status   string    `json:"status"`
	Receiver string    `json:"receiver"`
	Alerts   []Alert   `json:"alerts"`
}

// RewriteRules returns the rules file with every `for:` set to d.
func RewriteRules(raw []byte, d time.Duration) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parsing rules: %w", err)
	}
	groups, _ := doc["groups"].([]any)
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		rules, _ := gm["rules"].([]any)
		for _, r := range rules {
			if rm, ok := r.(map[string]any); ok {
				if _, has := rm["for"]; has {
					rm["for"] = d.String()
				}
			}
		}
	}
	return yaml.Marshal(doc)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start is StartServer for tests: it skips (fails under CI=true) without
// the binaries, uses a temporary directory unless o.Dir is set, and stops
// everything when the test ends.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	testenv.Require(t, Check() == nil, fmt.Sprint(Check()))
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := StartServer(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartServer starts the webhook receiver, Alertmanager and Prometheus
// (each on a free 127.0.0.1 port) and waits until both are ready.
func StartServer(ctx context.Context, o Options) (*Stack, error) {
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	s := &Stack{RulesFile: o.Rules}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.hook = &http.Server{Handler: http.HandlerFunc(s.receive), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.hook.Serve(hl) }()

	amAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	amCfg := map[string]any{
		"route": map[string]any{
			"receiver": "test", "group_by": []string{"alertname", "ip", "node"},
			"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h",
		},
		"receivers": []any{map[string]any{"name": "test", "webhook_configs": []any{map[string]any{
			"url": "http://" + hl.Addr().String() + "/", "send_resolved": true,
		}}}},
	}
	amFile := filepath.Join(o.Dir, "alertmanager.yml")
	if err := writeYAML(amFile, amCfg); err != nil {
		return nil, err
	}
	s.Alertmanager, err = proc.Start("alertmanager", exec.CommandContext(ctx, AlertmanagerBin,
		"--config.file="+amFile, "--storage.path="+filepath.Join(o.Dir, "am-data"),
		"--web.listen-address="+amAddr, "--cluster.listen-address=", "--log.level=warn"),
		filepath.Join(o.Dir, "alertmanager.log"))
	if err != nil {
		return nil, err
	}
	s.AlertmanagerURL = "http://" + amAddr

	raw, err := os.ReadFile(o.Rules)
	if err != nil {
		s.Close()
		return nil, err
	}
	if o.For > 0 {
		if raw, err = RewriteRules(raw, o.For); err != nil {
			s.Close()
			return nil, err
		}
	}
	rules := filepath.Join(o.Dir, "rules.yml")
	if err := os.WriteFile(rules, raw, 0o644); err != nil {
		s.Close()
		return nil, err
	}
	var static []any
	for _, t := range o.Targets {
		static = append(static, map[string]any{"targets": []string{t.Address}, "labels": map[string]string{"node": t.Node}})
	}
	promCfg := map[string]any{
		"global":         map[string]any{"scrape_interval": o.Interval.String(), "evaluation_interval": o.Interval.String(), "scrape_timeout": o.Interval.String()},
		"rule_files":     []string{rules},
		"alerting":       map[string]any{"alertmanagers": []any{map[string]any{"static_configs": []any{map[string]any{"targets": []string{amAddr}}}}}},
		"scrape_configs": []any{scrapeConfig(o, static)},
	}
	promFile := filepath.Join(o.Dir, "prometheus.yml")
	if err := writeYAML(promFile, promCfg); err != nil {
		s.Close()
		return nil, err
	}
	promAddr, err := freeAddr()
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Prometheus, err = proc.Start("prometheus", exec.CommandContext(ctx, PrometheusBin,
		"--config.file="+promFile, "--storage.tsdb.path="+filepath.Join(o.Dir, "prom-data"),
		"--web.listen-address="+promAddr, "--log.level=warn"),
		filepath.Join(o.Dir, "prometheus.log"))
	if err != nil {
		s.Close()
		return nil, err
	}
	s.PrometheusURL = "http://" + promAddr
	for _, u := range []string{s.PrometheusURL + "/-/ready", s.AlertmanagerURL + "/-/ready"} {
		if err := waitReady(ctx, u); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// scrapeConfig is the agents' scrape job.
func scrapeConfig(o Options, static []any) map[string]any {
	job := map[string]any{"job_name": "ipvs-guard", "static_configs": static}
	if o.Scheme == "https" {
		job["scheme"] = "https"
		job["tls_config"] = map[string]any{"insecure_skip_verify": true}
		if o.BearerTokenFile != "" {
			job["authorization"] = map[string]any{"type": "Bearer", "credentials_file": o.BearerTokenFile}
		}
	}
	return job
}

// Count returns how many series Prometheus's instant query expr returns.
func (s *Stack) Count(ctx context.Context, expr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.PrometheusURL+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("decoding Prometheus query: %w", err)
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	return len(body.Data.Result), nil
}

// ActiveTarget is a scrape target as Prometheus's /api/v1/targets lists it.
type ActiveTarget struct {
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
	Labels    map[string]string `json:"labels"`
}

// Targets returns Prometheus's active scrape targets.
func (s *Stack) Targets(ctx context.Context) ([]ActiveTarget, error) {
	var data struct {
		ActiveTargets []ActiveTarget `json:"activeTargets"`
	}
	if err := s.getAPI(ctx, "/api/v1/targets?state=active", "targets", &data); err != nil {
		return nil, err
	}
	return data.ActiveTargets, nil
}

// getAPI GETs path from Prometheus's HTTP API and decodes the answer's data
// into data; what names it in the error.
func (s *Stack) getAPI(ctx context.Context, path, what string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.PrometheusURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := struct {
		Data any `json:"data"`
	}{Data: data}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("decoding Prometheus %s: %w", what, err)
	}
	return nil
}

func writeYAML(path string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready: %w", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Stack) receive(w http.ResponseWriter, r *http.Request) {
	var n Notification
	if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n.Received = time.Now()
	s.mu.Lock()
	s.got = append(s.got, n)
	s.mu.Unlock()
}

// Notifications returns every webhook delivery so far.
func (s *Stack) Notifications() []Notification {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Notification(nil), s.got...)
}

// PromAlert is an alert as Prometheus's /api/v1/alerts lists it.
type PromAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// Alerts returns Prometheus's pending and firing alerts.
func (s *Stack) Alerts(ctx context.Context) ([]PromAlert, error) {
	var data struct {
		Alerts []PromAlert `json:"alerts"`
	}
	if err := s.getAPI(ctx, "/api/v1/alerts", "alerts", &data); err != nil {
		return nil, err
	}
	return data.Alerts, nil
}

// Close stops everything.
func (s *Stack) Close() {
	for _, p := range []*proc.Process{s.Prometheus, s.Alertmanager} {
		if p != nil {
			p.Stop(5 * time.Second)
		}
	}
	if s.hook != nil {
		_ = s.hook.Close()
	}
}

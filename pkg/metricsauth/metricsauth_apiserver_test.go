// SPDX-License-Identifier: Apache-2.0

//go:build apiserver

package metricsauth_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
	"github.com/ipvs-guard/ipvs-guard/pkg/metricsauth"
	"github.com/ipvs-guard/ipvs-guard/pkg/server"
)

// saToken returns a token of ServiceAccount ns/name, created if needed.
func saToken(t *testing.T, admin kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// TestScrapeAuthorizedByAPIServer: the agent's HTTPS /metrics, with the
// agent's own identity and RBAC (deploy/rbac), lets through a
// ServiceAccount bound to ipvs-guard-metrics-reader (200), refuses one
// without the binding (403), no token and a forged token (401), and sends
// no review again within the cache TTLs, one of each kind after.
func TestScrapeAuthorizedByAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	deploy := filepath.Join("..", "..", "deploy", "rbac")
	// MetalLB's namespace, which rbac.yaml's Role ipvs-guard-metallb lives in.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, filepath.Join(deploy, "serviceaccount.yaml"), filepath.Join(deploy, "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-ipvs-guard-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipvs-guard-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "monitoring", Name: "prometheus"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agentToken := saToken(t, admin, "ipvs-guard", "ipvs-guard")
	promToken := saToken(t, admin, "monitoring", "prometheus")
	otherToken := saToken(t, admin, "monitoring", "grafana")

	// The agent's own client, as `ipvs-guard run` builds it, its requests logged.
	var log apiservertest.RequestLog
	reviews, ok := apiservertest.AgentClient(t, log.Wrap(s.Config(agentToken))).(kube.ReviewInterface)
	if !ok {
		t.Fatal("the agent's client sends no reviews")
	}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	filter, err := metricsauth.New(metricsauth.Options{Reviews: reviews, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := server.NewTLSConfig(server.TLSOptions{Host: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewMux("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.UseTLS(tlsCfg)
	srv.Handle("/metrics", filter.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ipvs_guard_up 1")
	})))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed, as Prometheus' insecureSkipVerify
	scrape := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+srv.Addr()+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	reviewCount := func() (tokens, access int) {
		return len(log.Requests("/apis/authentication.k8s.io/v1/tokenreviews")),
			len(log.Requests("/apis/authorization.k8s.io/v1/subjectaccessreviews"))
	}

	steps := []struct {
		name          string
		advance       time.Duration
		token         string
		code          int
		tokens, authz int // reviews sent so far
	}{
		{"no token", 0, "", 401, 0, 0},
		{"forged token", 0, "not-a-token", 401, 1, 0},
		{"a ServiceAccount without the binding", 0, otherToken, 403, 2, 1},
		{"Prometheus' ServiceAccount, bound to the reader role", 0, promToken, 200, 3, 2},
		{"again within both TTLs: nothing sent", 30 * time.Second, promToken, 200, 3, 2},
		{"the denial is cached too", 0, otherToken, 403, 3, 2},
		{"token TTL (2 min) over: one TokenReview", 2 * time.Minute, promToken, 200, 4, 2},
		{"authorization TTL (5 min) over: one of each", 3 * time.Minute, promToken, 200, 5, 3},
	}
	for _, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		code, body := scrape(st.token)
		if code != st.code {
			t.Errorf("%s: %d %q, want %d", st.name, code, body, st.code)
		}
		if code == 200 && body != "ipvs_guard_up 1" {
			t.Errorf("%s: body %q", st.name, body)
		}
		if tk, az := reviewCount(); tk != st.tokens || az != st.authz {
			t.Errorf("%s: %d TokenReviews and %d SubjectAccessReviews sent, want %d and %d", st.name, tk, az, st.tokens, st.authz)
		}
		t.Logf("%s: %d %q", st.name, code, body)
	}
	for _, r := range log.Responses() {
		if !strings.HasSuffix(r, " Created") {
			t.Errorf("the agent's review %s was not accepted (RBAC: tokenreviews and subjectaccessreviews create)", r)
		}
	}

	// Without the review rules (an agent bound to nothing), a scrape is a
	// 500 that names nothing of the cluster, never a 200.
	var log2 apiservertest.RequestLog
	bare := apiservertest.AgentClient(t, log2.Wrap(s.Config(saToken(t, admin, "ipvs-guard", "unbound")))).(kube.ReviewInterface)
	f2, err := metricsauth.New(metricsauth.Options{Reviews: bare})
	if err != nil {
		t.Fatal(err)
	}
	srv2, err := server.NewMux("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv2.Handle("/metrics", f2.Wrap(http.NotFoundHandler()))
	go func() { _ = srv2.Run(runCtx) }()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv2.Addr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+promToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("agent without the review rules: %s, want 500", resp.Status)
	}
}

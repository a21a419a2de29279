// SPDX-License-Identifier: Apache-2.0

package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// fakeReviews answers reviews from maps and counts them.
type fakeReviews struct {
	users   map[string]string // token → user name
	allowed map[string]bool   // user name → may get /metrics
	fail    atomic.Bool
	block   chan struct{} // when set, each review waits for it

	tokenReviews, accessReviews atomic.Int32
	mu                          sync.Mutex
	lastSAR                     authorizationv1.SubjectAccessReviewSpec
}

var _ kube.ReviewInterface = (*fakeReviews)(nil)

func (f *fakeReviews) TokenReviews() kube.TokenReviewInterface { return tokenReviews{f} }
func (f *fakeReviews) SubjectAccessReviews() kube.SubjectAccessReviewInterface {
	return accessReviews{f}
}

type tokenReviews struct{ f *fakeReviews }

func (t tokenReviews) Create(_ context.Context, r *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	t.f.tokenReviews.Add(1)
	if t.f.block != nil {
		<-t.f.block
	}
	if t.f.fail.Load() {
		return nil, errors.New("connection refused")
	}
	out := r.DeepCopy()
	if name, ok := t.f.users[r.Spec.Token]; ok {
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
			Username: name, UID: "uid-" + name, Groups: []string{"system:authenticated"},
			Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/node-name": {"n1"}},
		}}
	} else {
		out.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	return out, nil
}

type accessReviews struct{ f *fakeReviews }

func (a accessReviews) Create(_ context.Context, r *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	a.f.accessReviews.Add(1)
	if a.f.fail.Load() {
		return nil, errors.New("connection refused")
	}
	a.f.mu.Lock()
	a.f.lastSAR = r.Spec
	a.f.mu.Unlock()
	out := r.DeepCopy()
	out.Status.Allowed = a.f.allowed[r.Spec.User] && r.Spec.NonResourceAttributes != nil &&
		r.Spec.NonResourceAttributes.Path == "/metrics" && r.Spec.NonResourceAttributes.Verb == "get"
	return out, nil
}

func newFilter(t *testing.T, f *fakeReviews, clk *clocktesting.FakePassiveClock, size int) http.Handler {
	t.Helper()
	filter, err := New(Options{Reviews: f, Clock: clk, CacheSize: size})
	if err != nil {
		t.Fatal(err)
	}
	return filter.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "metrics") }))
}

func do(h http.Handler, method, path, auth string) int {
	r := httptest.NewRequest(method, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestFilter(t *testing.T) {
	f := &fakeReviews{users: map[string]string{"prom": "system:serviceaccount:monitoring:prometheus", "other": "alice"},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus": true}}
	h := newFilter(t, f, clocktesting.NewFakePassiveClock(time.Now()), 0)
	tests := []struct {
		name, method, auth string
		want               int
	}{
		{"no token", http.MethodGet, "", http.StatusUnauthorized},
		{"basic auth", http.MethodGet, "Basic cHJvbTpwcm9t", http.StatusUnauthorized},
		{"empty bearer", http.MethodGet, "Bearer ", http.StatusUnauthorized},
		{"unknown token", http.MethodGet, "Bearer nope", http.StatusUnauthorized},
		{"authenticated, not authorized", http.MethodGet, "Bearer other", http.StatusForbidden},
		{"authorized", http.MethodGet, "Bearer prom", http.StatusOK},
		{"scheme case-insensitive", http.MethodGet, "bearer prom", http.StatusOK},
		{"HEAD", http.MethodHead, "Bearer prom", http.StatusOK},
		{"POST", http.MethodPost, "Bearer prom", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := do(h, tt.method, "/metrics", tt.auth); got != tt.want {
				t.Errorf("%s %q = %d, want %d", tt.method, tt.auth, got, tt.want)
			}
		})
	}
	f.mu.Lock()
	sar := f.lastSAR
	f.mu.Unlock()
	if sar.User != "system:serviceaccount:monitoring:prometheus" || sar.UID == "" || len(sar.Groups) != 1 ||
		len(sar.Extra["authentication.kubernetes.io/node-name"]) != 1 || sar.ResourceAttributes != nil {
		t.Errorf("SubjectAccessReview spec %+v, want the whole user and only non-resource attributes", sar)
	}
}

// TestFilterCaches: a token's answer is reused for TokenTTL, an
// authorization's for AuthorizationTTL, denials too; then asked again.
func TestFilterCaches(t *testing.T) {
	f := &fakeReviews{users: map[string]string{"prom": "prom", "other": "alice"}, allowed: map[string]bool{"prom": true}}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := newFilter(t, f, clk, 0)
	counts := func() [2]int32 { return [2]int32{f.tokenReviews.Load(), f.accessReviews.Load()} }
	steps := []struct {
		name    string
		advance time.Duration
		auth    string
		code    int
		reviews [2]int32 // token reviews, access reviews so far
	}{
		{"first scrape reviews both", 0, "Bearer prom", 200, [2]int32{1, 1}},
		{"again: both cached", 30 * time.Second, "Bearer prom", 200, [2]int32{1, 1}},
		{"unknown token reviewed", 0, "Bearer x", 401, [2]int32{2, 1}},
		{"unknown token cached", time.Second, "Bearer x", 401, [2]int32{2, 1}},
		{"denied user reviewed", 0, "Bearer other", 403, [2]int32{3, 2}},
		{"denied user cached", time.Second, "Bearer other", 403, [2]int32{3, 2}},
		{"token TTL over: token reviewed, authorization cached", 2 * time.Minute, "Bearer prom", 200, [2]int32{4, 2}},
		{"authorization TTL over", 3 * time.Minute, "Bearer prom", 200, [2]int32{5, 3}},
	}
	for _, s := range steps {
		clk.SetTime(clk.Now().Add(s.advance))
		if got := do(h, http.MethodGet, "/metrics", s.auth); got != s.code {
			t.Errorf("%s: code %d, want %d", s.name, got, s.code)
		}
		if got := counts(); got != s.reviews {
			t.Errorf("%s: reviews (token, access) %v, want %v", s.name, got, s.reviews)
		}
	}
}

// TestFilterReviewFailure: an API server that does not answer is a 500,
// not cached: the next scrape asks again.
func TestFilterReviewFailure(t *testing.T) {
	f := &fakeReviews{users: map[string]string{"prom": "prom"}, allowed: map[string]bool{"prom": true}}
	h := newFilter(t, f, clocktesting.NewFakePassiveClock(time.Now()), 0)
	f.fail.Store(true)
	if got := do(h, http.MethodGet, "/metrics", "Bearer prom"); got != http.StatusInternalServerError {
		t.Errorf("review failing: %d, want 500", got)
	}
	f.fail.Store(false)
	if got := do(h, http.MethodGet, "/metrics", "Bearer prom"); got != http.StatusOK {
		t.Errorf("review answering again: %d, want 200", got)
	}
	if n := f.tokenReviews.Load(); n != 2 {
		t.Errorf("%d token reviews, want 2 (a failure is not cached)", n)
	}
}

// TestFilterCoalesces: concurrent scrapes with one token share one review.
func TestFilterCoalesces(t *testing.T) {
	f := &fakeReviews{users: map[string]string{"prom": "prom"}, allowed: map[string]bool{"prom": true}, block: make(chan struct{})}
	h := newFilter(t, f, clocktesting.NewFakePassiveClock(time.Now()), 0)
	const n = 8
	codes := make(chan int, n)
	for range n {
		go func() { codes <- do(h, http.MethodGet, "/metrics", "Bearer prom") }()
	}
	// Let the first review through once every request waits on it.
	time.Sleep(100 * time.Millisecond)
	close(f.block)
	for range n {
		if c := <-codes; c != 200 {
			t.Errorf("code %d", c)
		}
	}
	if got := f.tokenReviews.Load(); got != 1 {
		t.Errorf("%d token reviews for %d concurrent scrapes, want 1", got, n)
	}
}

// TestCacheBounded: the caches keep at most CacheSize entries.
func TestCacheBounded(t *testing.T) {
	users := map[string]string{}
	for i := range 50 {
		users[fmt.Sprint("t", i)] = fmt.Sprint("u", i)
	}
	f := &fakeReviews{users: users}
	filter, err := New(Options{Reviews: f, CacheSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	h := filter.Wrap(http.NotFoundHandler())
	for tok := range users {
		do(h, http.MethodGet, "/metrics", "Bearer "+tok)
	}
	if n := filter.tokens.len(); n != 10 {
		t.Errorf("token cache holds %d entries, want 10", n)
	}
	if n := filter.authorizations.len(); n != 10 {
		t.Errorf("authorization cache holds %d entries, want 10", n)
	}
}

func TestAuthzKey(t *testing.T) {
	base := authenticationv1.UserInfo{Username: "u", UID: "1", Groups: []string{"a", "b"},
		Extra: map[string]authenticationv1.ExtraValue{"k": {"v"}}}
	same := base
	same.Groups = []string{"b", "a"}
	if authzKey(base, "/metrics") != authzKey(same, "/metrics") {
		t.Error("group order changes the key")
	}
	for name, u := range map[string]authenticationv1.UserInfo{
		"user":  {Username: "v", UID: "1", Groups: base.Groups, Extra: base.Extra},
		"uid":   {Username: "u", UID: "2", Groups: base.Groups, Extra: base.Extra},
		"group": {Username: "u", UID: "1", Groups: []string{"a"}, Extra: base.Extra},
		"extra": {Username: "u", UID: "1", Groups: base.Groups, Extra: map[string]authenticationv1.ExtraValue{"k": {"w"}}},
		"split": {Username: "u", UID: "1", Groups: []string{"a,b"}, Extra: base.Extra},
	} {
		if authzKey(u, "/metrics") == authzKey(base, "/metrics") {
			t.Errorf("a different %s gives the same key", name)
		}
	}
	if authzKey(base, "/metrics") == authzKey(base, "/other") {
		t.Error("the path does not change the key")
	}
}

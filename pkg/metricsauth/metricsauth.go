// SPDX-License-Identifier: Apache-2.0

// Package metricsauth lets only clients the API server vouches for read the
// agent's /metrics, as kube-rbac-proxy and controller-runtime's secure
// metrics server (WithAuthenticationAndAuthorization) do: the bearer token
// of each request is authenticated by a TokenReview, and the user it names
// is authorized by a SubjectAccessReview for the non-resource URL of the
// request with the verb its method maps to (GET /metrics: get "/metrics").
//
// Answers are cached, as kube-rbac-proxy caches them: a token's for
// TokenTTL (2 minutes), an authorization's for AuthorizationTTL (5 minutes),
// each cache a bounded LRU; concurrent requests with the same token share
// one review. A Prometheus scraping every 30 s with one token so costs the
// API server at most one TokenReview every 2 minutes and one
// SubjectAccessReview every 5 minutes per agent (docs/scale.md).
//
// k8s.io/apiserver's delegating authenticator and authorizer would do the
// same, but they come with client-go's full clientset (every API group
// registered at init), which the binary leaves out; the two reviews here go
// through pkg/kube's narrow typed client.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"github.com/ipvs-guard/ipvs-guard/pkg/kube"
)

// Defaults, kube-rbac-proxy's: how long a token's identity and an
// authorization are reused, and how many of each are kept.
const (
	DefaultTokenTTL         = 2 * time.Minute
	DefaultAuthorizationTTL = 5 * time.Minute
	DefaultCacheSize        = 1024
	// DefaultReviewTimeout bounds one review request: a scrape does not
	// wait longer than Prometheus' usual scrape timeout for the API server.
	DefaultReviewTimeout = 10 * time.Second
)

// Options configure a Filter. Zero values pick the defaults.
type Options struct {
	// Reviews sends the TokenReviews and SubjectAccessReviews.
	Reviews kube.ReviewInterface
	// TokenTTL is how long a token's review (authenticated or not) is reused.
	TokenTTL time.Duration
	// AuthorizationTTL is how long an authorization (allowed or denied) is reused.
	AuthorizationTTL time.Duration
	// CacheSize bounds each cache (entries; the least recently used goes first).
	CacheSize int
	// ReviewTimeout bounds each review request.
	ReviewTimeout time.Duration
	// Clock tells the time (tests step a fake one).
	Clock clock.PassiveClock
}

// Filter authenticates and authorizes requests by the API server before
// handing them on.
type Filter struct {
	reviews                kube.ReviewInterface
	tokenTTL, authzTTL     time.Duration
	timeout                time.Duration
	clock                  clock.PassiveClock
	tokens, authorizations *ttlCache
	tokenGroup, authzGroup singleflight.Group
}

// New returns a Filter; o.Reviews is required.
func New(o Options) (*Filter, error) {
	if o.Reviews == nil {
		return nil, errors.New("metricsauth: no review client")
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = DefaultTokenTTL
	}
	if o.AuthorizationTTL <= 0 {
		o.AuthorizationTTL = DefaultAuthorizationTTL
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.ReviewTimeout <= 0 {
		o.ReviewTimeout = DefaultReviewTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Filter{
		reviews: o.Reviews, tokenTTL: o.TokenTTL, authzTTL: o.AuthorizationTTL, timeout: o.ReviewTimeout, clock: o.Clock,
		tokens: newTTLCache(o.CacheSize, o.Clock), authorizations: newTTLCache(o.CacheSize, o.Clock),
	}, nil
}

// user is who a token authenticates as, or why it does not.
type user struct {
	authenticated bool
	info          authenticationv1.UserInfo
	why           string
}

// decision is an authorization answer.
type decision struct {
	allowed bool
	reason  string
}

// Wrap returns h behind the filter: a request without a bearer token gets
// 401, one whose token the API server does not authenticate 401, one whose
// user may not do it 403; a review that fails (API server unreachable) is
// 500 and is not cached. Only GET and HEAD reach h (405 otherwise).
func (f *Filter) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context()).WithValues("remote", r.RemoteAddr, "path", r.URL.Path)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ipvs-guard"`)
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		u, err := f.authenticate(r.Context(), token)
		if err != nil {
			logger.Error(err, "Authenticating a metrics request")
			http.Error(w, "Internal Server Error: authentication failed", http.StatusInternalServerError)
			return
		}
		if !u.authenticated {
			logger.V(2).Info("Unauthenticated metrics request", "why", u.why)
			w.Header().Set("WWW-Authenticate", `Bearer realm="ipvs-guard"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		d, err := f.authorize(r.Context(), u.info, r.URL.Path)
		if err != nil {
			logger.Error(err, "Authorizing a metrics request", "user", u.info.Username)
			http.Error(w, "Internal Server Error: authorization failed", http.StatusInternalServerError)
			return
		}
		if !d.allowed {
			logger.V(2).Info("Forbidden metrics request", "user", u.info.Username, "reason", d.reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not get %s", u.info.Username, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate returns who token is, from the cache or a TokenReview.
func (f *Filter) authenticate(ctx context.Context, token string) (user, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if v, ok := f.tokens.get(key); ok {
		return v.(user), nil
	}
	v, err, _ := f.tokenGroup.Do(key, func() (any, error) {
		if v, ok := f.tokens.get(key); ok {
			return v, nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.timeout)
		defer cancel()
		tr, err := f.reviews.TokenReviews().Create(rctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("sending a TokenReview: %w", err)
		}
		u := user{authenticated: tr.Status.Authenticated, info: tr.Status.User, why: tr.Status.Error}
		f.tokens.add(key, u, f.tokenTTL)
		return u, nil
	})
	if err != nil {
		return user{}, err //nolint:wrapcheck // wrapped above
	}
	return v.(user), nil
}

// authorize returns whether u may get path, from the cache or a
// SubjectAccessReview.
func (f *Filter) authorize(ctx context.Context, u authenticationv1.UserInfo, path string) (decision, error) {
	key := authzKey(u, path)
	if v, ok := f.authorizations.get(key); ok {
		return v.(decision), nil
	}
	v, err, _ := f.authzGroup.Do(key, func() (any, error) {
		if v, ok := f.authorizations.get(key); ok {
			return v, nil
		}
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range u.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.timeout)
		defer cancel()
		sar, err := f.reviews.SubjectAccessReviews().Create(rctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("sending a SubjectAccessReview: %w", err)
		}
		d := decision{allowed: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason}
		if sar.Status.EvaluationError != "" {
			d.reason += " (" + sar.Status.EvaluationError + ")"
		}
		f.authorizations.add(key, d, f.authzTTL)
		return d, nil
	})
	if err != nil {
		return decision{}, err //nolint:wrapcheck // wrapped above
	}
	return v.(decision), nil
}

// authzKey identifies an authorization question: the whole user (name,
// uid, groups, extra) and the path; the verb is always get.
func authzKey(u authenticationv1.UserInfo, path string) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	field(u.Username)
	field(u.UID)
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	for _, g := range groups {
		field("g=" + g)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field("x=" + k)
		for _, v := range u.Extra[k] {
			field(v)
		}
	}
	field("path=" + path)
	return hex.EncodeToString(h.Sum(nil))
}

// ttlCache is a bounded LRU whose entries expire.
type ttlCache struct {
	clock clock.PassiveClock
	mu    sync.Mutex // guards lru (its own lock does not cover get-then-remove)
	lru   *lru.Cache
}

type entry struct {
	value   any
	expires time.Time
}

func newTTLCache(size int, c clock.PassiveClock) *ttlCache {
	return &ttlCache{clock: c, lru: lru.New(size)}
}

func (c *ttlCache) get(key string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.lru.Get(key)
	if !ok {
		return nil, false
	}
	e := v.(entry)
	if !c.clock.Now().Before(e.expires) {
		c.lru.Remove(key)
		return nil, false
	}
	return e.value, true
}

func (c *ttlCache) add(key string, v any, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Add(key, entry{value: v, expires: c.clock.Now().Add(ttl)})
}

func (c *ttlCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

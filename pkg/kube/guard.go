// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// Limits of what the API server can make ipvs-guard read (docs/scale.md).
const (
	// DefaultListLimit bounds the bytes of one answer, and of all the pages
	// of one paginated list together: the largest list ipvs-guard makes is
	// every Service of the cluster (protobuf, about 1 KiB each: 5,000
	// Services are about 5 MiB) or one 500-Node page of cleanup (JSON-free
	// protobuf, at most a few MiB); 32 MiB is several times either, and
	// with the buffer growth of reading it, inside the chart's 128 MiB.
	DefaultListLimit = 32 << 20
	// DefaultFrameLimit bounds one event of a watch stream: the size
	// client-go's own decoder allows a protobuf watch event
	// (k8s.io/apimachinery streaming, 16 MiB); JSON watch streams, which
	// client-go reads one whole event at a time without a bound, get the
	// same one here. An object stored in etcd is at most 1.5 MiB.
	DefaultFrameLimit = 16 << 20
)

var (
	// ErrResponseTooLarge: an answer of the API server (or the pages of one
	// list together) is larger than the Guard's limit.
	ErrResponseTooLarge = errors.New("the API server's answer is larger than ipvs-guard reads")
	// ErrContinueRepeated: the API server handed out a continue token of
	// a list it had already handed out; following it would list forever.
	ErrContinueRepeated = errors.New("the API server repeated a continue token: the list would never end")
)

// Guard bounds what an API server, broken or hostile, can make a client
// read: each answer to ListLimit bytes, each paginated list (every page of
// it together) to PagesLimit, each event of a watch stream to FrameLimit bytes, and
// a list whose continue token comes back is refused instead of followed.
// It also remembers the last failure to reach the server (a refused
// connection, an unknown host), so a timeout can say what was behind it.
// One Guard serves every client built from one configuration.
type Guard struct {
	// ListLimit bounds one answer; DefaultListLimit when 0.
	ListLimit int64
	// PagesLimit bounds the pages of one list together, for a client that
	// keeps them all (an informer's pager); ListLimit when 0, no bound
	// when negative (a client that handles one page at a time).
	PagesLimit int64
	// FrameLimit is DefaultFrameLimit when 0.
	FrameLimit int64

	// mu guards chains and lastErr.
	mu sync.Mutex
	// chains are the paginated lists in progress, by request (path and
	// query without the paging parameters).
	chains  map[string]*chain
	lastErr error
}

// chain is one paginated list: the continue tokens it followed (hashed)
// and the bytes of its pages so far.
type chain struct {
	tokens map[uint64]struct{}
	bytes  int64
}

// NewGuard returns a Guard with the default limits.
func NewGuard() *Guard { return &Guard{} }

// Install makes every client built from cfg go through g.
func (g *Guard) Install(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &guardTransport{g: g, next: rt} })
}

// LastError returns the last failure talking to the API server (the
// request and the dial or TLS error, or an answer refused for its size or
// a repeated continue token), nil when there was none.
func (g *Guard) LastError() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastErr
}

func (g *Guard) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastErr = err
}

func (g *Guard) listLimit() int64 {
	if g.ListLimit > 0 {
		return g.ListLimit
	}
	return DefaultListLimit
}

func (g *Guard) pagesLimit() int64 {
	if g.PagesLimit == 0 {
		return g.listLimit()
	}
	return g.PagesLimit
}

func (g *Guard) frameLimit() int64 {
	if g.FrameLimit > 0 {
		return g.FrameLimit
	}
	return DefaultFrameLimit
}

// guardTransport is the Guard between a client and its transport.
type guardTransport struct {
	g    *Guard
	next http.RoundTripper
}

func (t *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g := t.g
	q := req.URL.Query()
	var ch *chain
	if req.Method == http.MethodGet && q.Get("limit") != "" {
		var err error
		if ch, err = g.follow(req.URL, q); err != nil {
			return nil, err
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		if req.Context().Err() == nil {
			g.fail(&url.Error{Op: req.Method, URL: redact(req.URL), Err: err})
		}
		return nil, err
	}
	if w := q.Get("watch"); w == "true" || w == "1" {
		if !isProtobuf(resp.Header.Get("Content-Type")) {
			resp.Body = &frameLimitedBody{ReadCloser: resp.Body, g: g, max: g.frameLimit(), what: req.Method + " " + redact(req.URL)}
		}
		return resp, nil
	}
	lb := &limitedBody{ReadCloser: resp.Body, g: g, max: g.listLimit(), what: req.Method + " " + redact(req.URL)}
	if pages := g.pagesLimit(); ch != nil && pages > 0 {
		g.mu.Lock()
		if left := pages - ch.bytes; left < lb.max {
			lb.max, lb.ch = left, ch
		}
		g.mu.Unlock()
		lb.counted = ch
	}
	resp.Body = lb
	return resp, nil
}

// follow returns the list u continues (a new one without a continue
// token), or ErrContinueRepeated when u's token was followed before.
func (g *Guard) follow(u *url.URL, q url.Values) (*chain, error) {
	key := listKey(u, q)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.chains == nil {
		g.chains = map[string]*chain{}
	}
	cont := q.Get("continue")
	ch := g.chains[key]
	if cont == "" || ch == nil {
		ch = &chain{tokens: map[uint64]struct{}{}}
		g.chains[key] = ch
	}
	if cont == "" {
		return ch, nil
	}
	h := fnv.New64a()
	_, _ = io.WriteString(h, cont)
	sum := h.Sum64()
	if _, ok := ch.tokens[sum]; ok {
		delete(g.chains, key)
		err := fmt.Errorf("GET %s: %w", redact(u), ErrContinueRepeated)
		g.lastErr = err
		return nil, err
	}
	ch.tokens[sum] = struct{}{}
	return ch, nil
}

// listKey names the list a request pages through: its path and query
// without the paging parameters.
func listKey(u *url.URL, q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		switch k {
		case "continue", "limit", "resourceVersion", "resourceVersionMatch", "timeout", "timeoutSeconds":
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(u.Path)
	for _, k := range keys {
		b.WriteString("?" + k + "=" + strings.Join(q[k], ","))
	}
	return b.String()
}

// redact is u without its query (a continue token may be long).
func redact(u *url.URL) string {
	c := *u
	c.RawQuery, c.User = "", nil
	return c.String()
}

func isProtobuf(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && strings.HasPrefix(mt, "application/vnd.kubernetes.protobuf")
}

// limitedBody fails a read past max bytes; the bytes read count against
// its list (ch, when paginated).
type limitedBody struct {
	io.ReadCloser
	g *Guard
	// counted is the list whose pages' bytes this one adds to.
	counted *chain
	// ch is set when the pages together are the tighter limit.
	ch   *chain
	max  int64
	n    int64
	what string
	err  error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if rest := b.max - b.n + 1; int64(len(p)) > rest {
		p = p[:rest] // one byte past the limit proves it is passed
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.counted != nil {
		b.g.mu.Lock()
		b.counted.bytes += int64(n)
		b.g.mu.Unlock()
	}
	if b.n > b.max {
		b.err = b.tooLarge()
		return 0, b.err
	}
	return n, err
}

func (b *limitedBody) tooLarge() error {
	what, limit := "the answer", b.g.listLimit()
	if b.ch != nil {
		what, limit = "the list's pages together", b.g.pagesLimit()
	}
	err := fmt.Errorf("%s: %s passed %d MiB: %w", b.what, what, limit>>20, ErrResponseTooLarge)
	b.g.fail(err)
	return err
}

// frameLimitedBody fails a watch stream one of whose events (the bytes
// between two newlines: the API server writes one JSON event per line) is
// longer than max.
type frameLimitedBody struct {
	io.ReadCloser
	g    *Guard
	max  int64
	line int64
	what string
	err  error
}

func (b *frameLimitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	chunk := p[:n]
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			b.line += int64(len(chunk))
			break
		}
		b.line = 0
		chunk = chunk[i+1:]
	}
	if b.line > b.max {
		b.err = fmt.Errorf("%s: a watch event passed %d MiB: %w", b.what, b.max>>20, ErrResponseTooLarge)
		b.g.fail(b.err)
		return 0, b.err
	}
	return n, err
}

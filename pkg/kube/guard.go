// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"bytes"
	"encoding/binary"
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
	// every Service of the cluster (protobuf, under 1 KiB each: 5,000
	// Services are under 5 MiB; MetalLB's ServiceL2Statuses in JSON about
	// as much) or one 500-Node page of cleanup (protobuf, a few MiB).
	DefaultListLimit = 16 << 20
	// DefaultTotalLimit bounds the bytes of every answer being read at
	// the same moment together (an agent starts several informers at
	// once): with the buffer growth of reading them and the garbage
	// collector's headroom, inside the chart's 128 MiB.
	DefaultTotalLimit = 16 << 20
	// DefaultFrameLimit bounds one event of a watch stream. An object
	// stored in etcd is at most 1.5 MiB (a custom resource as JSON, a
	// built-in one as protobuf), so an event is under 4 MiB; client-go
	// reads a JSON event whole without a bound, and a protobuf one up to
	// 16 MiB.
	DefaultFrameLimit = 4 << 20
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
// read: each answer to ListLimit bytes, the answers being read at once
// together to TotalLimit, each paginated list (every page of
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
	// TotalLimit bounds every answer being read at the same moment
	// together; DefaultTotalLimit when 0.
	TotalLimit int64
	// FrameLimit is DefaultFrameLimit when 0.
	FrameLimit int64

	// mu guards chains and lastErr.
	mu sync.Mutex
	// chains are the paginated lists in progress, by request (path and
	// query without the paging parameters).
	chains  map[string]*chain
	lastErr error
	// open is the bytes read so far of the answers not yet closed.
	open int64
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

func (g *Guard) totalLimit() int64 {
	if g.TotalLimit > 0 {
		return g.TotalLimit
	}
	return DefaultTotalLimit
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
		resp.Body = &frameLimitedBody{ReadCloser: resp.Body, g: g, proto: isProtobuf(resp.Header.Get("Content-Type")),
			max: g.frameLimit(), what: req.Method + " " + redact(req.URL)}
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
	// closed: the answer no longer counts against the total (read to
	// its end, or closed).
	closed bool
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
	b.g.mu.Lock()
	if b.counted != nil {
		b.counted.bytes += int64(n)
	}
	var total int64
	if !b.closed {
		b.g.open += int64(n)
		total = b.g.open
		if err != nil { // the whole answer is read: nothing more to hold
			b.g.open -= b.n
			b.closed = true
		}
	}
	b.g.mu.Unlock()
	switch {
	case b.n > b.max:
		b.err = b.tooLarge()
	case total > b.g.totalLimit():
		b.err = fmt.Errorf("%s: the answers being read together passed %d MiB: %w", b.what, b.g.totalLimit()>>20, ErrResponseTooLarge)
		b.g.fail(b.err)
	}
	if b.err != nil {
		return 0, b.err
	}
	return n, err
}

// Close releases what the answer counted against the Guard's total.
func (b *limitedBody) Close() error {
	b.g.mu.Lock()
	if !b.closed {
		b.g.open -= b.n
		b.closed = true
	}
	b.g.mu.Unlock()
	return b.ReadCloser.Close()
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

// frameLimitedBody fails a watch stream one of whose events is longer
// than max: in JSON the bytes between two newlines (the API server writes
// one event per line), in protobuf the length its 4-byte big-endian prefix
// declares (client-go's framing).
type frameLimitedBody struct {
	io.ReadCloser
	g     *Guard
	proto bool
	max   int64
	what  string
	err   error
	// line is the bytes of the event being read so far.
	line int64
	// header collects a protobuf frame's length prefix; left is what
	// remains of its frame once the prefix is read.
	header []byte
	left   int64
}

func (b *frameLimitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	before := b.line
	var tooLong bool
	if b.proto {
		tooLong = b.scanProto(p[:n])
	} else {
		tooLong = b.scanJSON(p[:n])
	}
	// The event being read is held by the decoder until its end: it
	// counts against the total like an answer being read.
	b.g.mu.Lock()
	b.g.open += b.line - before
	total := b.g.open
	b.g.mu.Unlock()
	switch {
	case tooLong:
		b.err = fmt.Errorf("%s: a watch event passed %d MiB: %w", b.what, b.max>>20, ErrResponseTooLarge)
	case total > b.g.totalLimit():
		b.err = fmt.Errorf("%s: the answers being read together passed %d MiB: %w", b.what, b.g.totalLimit()>>20, ErrResponseTooLarge)
	}
	if b.err != nil {
		b.g.fail(b.err)
		return 0, b.err
	}
	return n, err
}

// scanJSON follows the lines of chunk; true when one is longer than max.
func (b *frameLimitedBody) scanJSON(chunk []byte) bool {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			b.line += int64(len(chunk))
			return b.line > b.max
		}
		if b.line+int64(i) > b.max {
			return true
		}
		b.line = 0
		chunk = chunk[i+1:]
	}
	return false
}

// scanProto follows the frames of chunk; true when one declares more than max.
func (b *frameLimitedBody) scanProto(chunk []byte) bool {
	for len(chunk) > 0 {
		if b.left == 0 {
			need := 4 - len(b.header)
			if need > len(chunk) {
				need = len(chunk)
			}
			b.header = append(b.header, chunk[:need]...)
			chunk = chunk[need:]
			if len(b.header) < 4 {
				return false
			}
			b.left = int64(binary.BigEndian.Uint32(b.header))
			b.header = b.header[:0]
			b.line = 0
			if b.left > b.max {
				return true
			}
			continue
		}
		k := min(int64(len(chunk)), b.left)
		b.line += k
		b.left -= k
		chunk = chunk[k:]
		if b.left == 0 {
			b.line = 0
		}
	}
	return false
}

// Close releases what the event being read counted against the total.
func (b *frameLimitedBody) Close() error {
	b.g.mu.Lock()
	b.g.open -= b.line
	b.line = 0
	b.g.mu.Unlock()
	return b.ReadCloser.Close()
}

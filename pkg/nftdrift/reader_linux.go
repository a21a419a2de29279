// SPDX-License-Identifier: Apache-2.0

//go:build linux

package nftdrift

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reader reads kube-proxy's nftables tables over netlink, and keeps what
// it read. Its first read dumps everything: per family the table, its
// chains, its sets, every rule (one dump), the three verdict maps and each
// anonymous DNAT map. After that it follows nf_tables' change feed (the
// NFNLGRP_NFTABLES multicast group, which the kernel sends every committed
// change to): a read applies the chains, sets and verdict-map elements the
// feed named and dumps again only the rules of the chains whose rules
// changed and the anonymous maps it has not seen (an anonymous map bound to
// its rule cannot change, and the kernel never reuses a table's or a set's
// handle); with nothing in the feed it reads nothing. When the kernel
// dropped part of the feed (the socket's buffer overflowed, as a full sync
// of thousands of Services can), when kube-proxy's table was made again,
// and at least every fullReadPeriod, it reads everything again. Without the
// feed (joining the group needs CAP_NET_ADMIN) a read whose ruleset
// generation did not move returns the last tables, and any other read is a
// full one (anonymous maps still dumped once per handle).
//
// The kernel finds a set by a linear search of its table's sets, twice per
// element dump: a full read of 10,000 maps costs it O(maps²), as `nft
// list` pays too. The zero value is ready; safe for concurrent use. The
// tables Read returns are the reader's own: valid, and not to be changed,
// until the next Read.
type Reader struct {
	// NetNS is the network namespace to read (a path such as
	// /var/run/netns/x); empty is the process's own.
	NetNS string
	// NoFeed reads without the change feed, as where joining it is not
	// allowed: the generation decides whether to read everything again.
	NoFeed bool

	mu sync.Mutex
	// feed is the socket on the change feed (nil before the first read, or
	// when joining failed: feedErr).
	feed    *conn
	feedErr error
	// fams are the families' tables as of the last read (nil: none yet).
	fams   []*famState
	fullAt time.Time
	// gen is the generation of the last full read (without the feed).
	gen uint32
	// maps are the entries of the anonymous maps the reader knows.
	maps  map[mapKey][]mapEntry
	stats ReaderStats
}

// fullReadPeriod bounds how long the reader follows the feed before it
// reads everything again (the first read's cost, once an hour; kube-proxy's
// own full sync rewrites every chain hourly as well).
const fullReadPeriod = time.Hour

// famState is one family's table and what keeps it current.
type famState struct {
	fam    byte
	t      Table
	handle uint64
	// anon are the table's anonymous sets by name.
	anon map[string]setInfo
	// rules are the rules of the service-, local-, external- and
	// endpoint- chains.
	rules map[string][]rule
}

// ReaderStats counts a Reader's work, for tests and benchmarks.
type ReaderStats struct {
	// Reads are the calls of Read; Unchanged those answered without a
	// request (nothing in the feed, or the generation had not moved);
	// Full the reads of everything; Followed those that applied the feed.
	Reads, Unchanged, Full, Followed int
	// ChainDumps are the rule dumps of single chains the feed named.
	ChainDumps int
	// MapDumps are the element dumps of anonymous maps; MapsCached the
	// anonymous maps whose elements came from an earlier read.
	MapDumps, MapsCached int
	// Retries are the full reads begun again because the ruleset changed
	// while they ran; Overflows the times the kernel dropped part of the
	// feed.
	Retries, Overflows int
	// Feed is false when the reader could not join the change feed.
	Feed bool
}

// mapKey names an anonymous map for as long as it exists: the kernel numbers
// tables per network namespace and sets per table, never reusing a handle.
type mapKey struct {
	family byte
	table  uint64
	set    uint64
}

// families are the nftables families read, in order: ip then ip6.
var families = []struct {
	f    byte
	name string
}{{unix.NFPROTO_IPV4, "ip"}, {unix.NFPROTO_IPV6, "ip6"}}

// Stats returns what the reader did so far.
func (r *Reader) Stats() ReaderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Feed = r.feed != nil
	return s
}

// maxAttempts bounds the full reads begun again because kube-proxy
// committed a change while one ran.
const maxAttempts = 3

// Read returns kube-proxy's table of each family, ip then ip6.
func (r *Reader) Read() ([]Table, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Reads++
	if r.feed == nil && r.feedErr == nil && !r.NoFeed {
		r.feed, r.feedErr = r.join()
	}
	if r.feed != nil && r.fams != nil && time.Since(r.fullAt) < fullReadPeriod {
		evs, overflow, err := r.feed.drain()
		if err == nil && overflow {
			r.stats.Overflows++
		}
		if err == nil && !overflow && len(evs) == 0 {
			// Nothing committed since: no request at all.
			r.stats.Unchanged++
			return r.tables(), nil
		}
		if err == nil && !overflow {
			c, err := r.dialRaw()
			if err != nil {
				return nil, err
			}
			defer c.Close()
			changed, full, err := r.follow(c, evs)
			if err == nil && !full {
				if changed {
					r.stats.Followed++
				} else {
					r.stats.Unchanged++
				}
				return r.tables(), nil
			}
		}
		// A gap in the feed, kube-proxy's table made again, or a request
		// that failed: everything is read again.
	}
	c, err := r.dialRaw()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if r.feed == nil && r.fams != nil {
		if gen, err := c.gen(); err == nil && gen == r.gen {
			r.stats.Unchanged++
			return r.tables(), nil
		}
	}
	return r.readAll(c)
}

// readAll reads everything, as one generation of the ruleset: a read during
// which the generation moved is begun again (at most maxAttempts reads; the
// last stands). What the feed holds from before is in the dumps: it is
// dropped first.
func (r *Reader) readAll(c *conn) ([]Table, error) {
	r.fams = nil
	if r.feed != nil {
		if _, _, err := r.feed.drain(); err != nil {
			r.feed.Close()
			r.feed, r.feedErr = nil, fmt.Errorf("reading the nftables change feed: %w", err)
		}
	}
	gen, err := c.gen()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		r.stats.Full++
		maps := map[mapKey][]mapEntry{}
		var fams []*famState
		for _, fam := range families {
			st, err := r.readTable(c, fam.f, fam.name, maps)
			if err != nil {
				return nil, fmt.Errorf("reading table %s %s: %w", fam.name, TableName, err)
			}
			fams = append(fams, st)
		}
		r.maps, r.fams, r.fullAt = maps, fams, time.Now()
		after, err := c.gen()
		if err != nil {
			return nil, err
		}
		if after == gen || attempt == maxAttempts {
			r.gen = after
			return r.tables(), nil
		}
		r.stats.Retries++
		gen = after
	}
}

// tables returns the families' tables.
func (r *Reader) tables() []Table {
	out := make([]Table, 0, len(r.fams))
	for _, st := range r.fams {
		out = append(out, st.t)
	}
	return out
}

// mapEntry is one element of a DNAT map, decoded: the endpoint it DNATs to,
// or the endpoint- chain it jumps to (older releases).
type mapEntry struct {
	value netip.AddrPort
	chain string
}

// mapEntryOf decodes one DNAT map element, copying nothing of the netlink
// answer (a cached entry would keep it alive).
func mapEntryOf(e element, v6 bool) (mapEntry, bool) {
	if e.verdict != "" {
		if c := chainOf(e.verdict); c != "" {
			return mapEntry{chain: c}, true
		}
		return mapEntry{}, false
	}
	if ap, ok := decodeAddrPort(e.value, v6); ok {
		return mapEntry{value: ap}, true
	}
	return mapEntry{}, false
}

// conn is one netlink socket for every request of a read (a socket per
// request was most of the CPU at 10,000 chains). Answers are read into one
// buffer of recvBuffer bytes: the kernel sizes each skb of a dump by the
// largest read the socket has seen, and re-walks the table from its start
// for each, so a page-sized read (netlink.Conn's) made the dump of 10,000
// rules or sets quadratic in the kernel.
type conn struct {
	nl  *netlink.Conn
	raw syscall.RawConn
	buf []byte
}

// recvBuffer is the answer buffer: the kernel fills a dump's skb up to
// 32 KiB.
const recvBuffer = 64 << 10

// errDumpInterrupted is a dump the kernel marked inconsistent (the table
// changed while it ran).
var errDumpInterrupted = errors.New("the kernel interrupted a dump: the ruleset changed while it was read")

// dialRaw opens the socket in r's network namespace.
func (r *Reader) dialRaw() (*conn, error) {
	cfg := &netlink.Config{}
	if r.NetNS != "" {
		f, err := os.Open(r.NetNS)
		if err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", r.NetNS, err)
		}
		// The socket is created in the namespace while f is open; it
		// stays there once f is closed.
		defer f.Close()
		cfg.NetNS = int(f.Fd())
	}
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening nftables netlink: %w", err)
	}
	raw, err := nl.SyscallConn()
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("opening nftables netlink: %w", err)
	}
	return &conn{nl: nl, raw: raw, buf: make([]byte, recvBuffer)}, nil
}

// Close closes the socket.
func (c *conn) Close() error { return c.nl.Close() }

// recv reads one datagram of answers into c.buf.
func (c *conn) recv() ([]byte, error) {
	var n, flags int
	var rerr error
	if err := c.raw.Read(func(fd uintptr) bool {
		n, _, flags, _, rerr = unix.Recvmsg(int(fd), c.buf, nil, 0)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	if flags&unix.MSG_TRUNC != 0 {
		return nil, fmt.Errorf("a netlink answer larger than %d bytes", len(c.buf))
	}
	return c.buf[:n], nil
}

// request sends one nf_tables request (a dump when dump is set) and calls
// fn with each answer past its nfgenmsg header. The bytes fn gets are
// overwritten by the next read: fn decodes, it keeps nothing.
func (c *conn) request(msg uint16, family byte, dump bool, fn func([]byte) error, a ...netlink.Attribute) error {
	data, err := netlink.MarshalAttributes(a)
	if err != nil {
		return err
	}
	flags := netlink.Request
	if dump {
		flags |= netlink.Dump
	}
	sent, err := c.nl.Send(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msg), Flags: flags},
		// nfgenmsg: family, version NFNETLINK_V0, resource id 0.
		Data: append([]byte{family, unix.NFNETLINK_V0, 0, 0}, data...),
	})
	if err != nil {
		return err
	}
	interrupted := false
	for {
		b, err := c.recv()
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(b)
		if err != nil {
			return fmt.Errorf("parsing a netlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != sent.Header.Sequence {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR, unix.NLMSG_DONE:
				if len(m.Data) >= 4 {
					if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code < 0 {
						return syscall.Errno(-code)
					}
				}
				if interrupted {
					return errDumpInterrupted
				}
				return nil
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			if len(m.Data) >= 4 {
				if err := fn(m.Data[4:]); err != nil {
					return err
				}
			}
			if !dump {
				return nil
			}
		}
	}
}

// gen returns the ruleset's generation: it moves with every committed
// change in the network namespace.
func (c *conn) gen() (uint32, error) {
	var g uint32
	got := false
	err := c.request(unix.NFT_MSG_GETGEN, unix.AF_UNSPEC, false, func(b []byte) (err error) {
		g, err = decodeGen(b)
		got = err == nil
		return err
	})
	if err == nil && !got {
		err = errors.New("no answer")
	}
	if err != nil {
		return 0, fmt.Errorf("reading the nftables generation: %w", err)
	}
	return g, nil
}

func str(typ uint16, s string) netlink.Attribute {
	return netlink.Attribute{Type: typ, Data: append([]byte(s), 0)}
}

// readTable reads one family's kube-proxy table: chains, sets, every rule
// (one dump), the three verdict maps and the anonymous DNAT maps not read
// before (maps collects the anonymous maps seen).
func (r *Reader) readTable(c *conn, fam byte, name string, maps map[mapKey][]mapEntry) (*famState, error) {
	st := &famState{fam: fam, t: emptyTable(name), anon: map[string]setInfo{}, rules: map[string][]rule{}}
	t := &st.t
	err := c.request(unix.NFT_MSG_GETTABLE, fam, false, func(b []byte) (err error) {
		st.handle, err = decodeTableHandle(b)
		return err
	}, str(unix.NFTA_TABLE_NAME, TableName))
	if errors.Is(err, unix.ENOENT) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading the table: %w", err)
	}
	t.Present = true

	if err := c.request(unix.NFT_MSG_GETCHAIN, fam, true, func(b []byte) error {
		tbl, ch, err := decodeChain(b)
		if err != nil {
			return fmt.Errorf("decoding a chain: %w", err)
		}
		if tbl == TableName {
			st.addChain(ch)
		}
		return nil
	}, str(unix.NFTA_CHAIN_TABLE, TableName)); err != nil {
		return st, fmt.Errorf("listing chains: %w", err)
	}

	if err := c.request(unix.NFT_MSG_GETSET, fam, true, func(b []byte) error {
		s, tbl, err := decodeSet(b)
		if err != nil {
			return fmt.Errorf("decoding a set: %w", err)
		}
		if tbl == TableName {
			st.addSet(s, maps)
		}
		return nil
	}, str(unix.NFTA_SET_TABLE, TableName)); err != nil {
		return st, fmt.Errorf("listing sets: %w", err)
	}
	for _, m := range VerdictMaps {
		if !t.Maps[m] {
			continue
		}
		if err := c.elements(fam, m, func(e element) { st.setElement(m, e, true) }); err != nil {
			return st, err
		}
	}

	// Every rule of the table in one dump.
	if err := c.request(unix.NFT_MSG_GETRULE, fam, true, func(b []byte) error {
		ru, err := decodeRule(b, fam == unix.NFPROTO_IPV6)
		if err != nil {
			return fmt.Errorf("decoding a rule: %w", err)
		}
		if _, ok := st.rules[ru.chain]; ok {
			st.rules[ru.chain] = append(st.rules[ru.chain], ru)
		}
		return nil
	}, str(unix.NFTA_RULE_TABLE, TableName)); err != nil {
		return st, fmt.Errorf("listing rules: %w", err)
	}
	for ch := range st.rules {
		if err := r.derive(c, st, ch, maps); err != nil {
			return st, err
		}
	}
	return st, nil
}

func emptyTable(family string) Table {
	return Table{Family: family, Chains: map[string]bool{}, Maps: map[string]bool{}, ServiceIPs: map[ServiceKey]string{},
		NodePorts: map[PortKey]string{}, NoEndpoint: map[ServiceKey]string{}, DNAT: map[string][]netip.AddrPort{}, Rules: map[string]int{}}
}

// dnatChain reports whether a chain DNATs to a Service's endpoints
// (service-, local-, external-); endpointChain, an endpoint- chain of older
// releases.
func dnatChain(n string) bool {
	return strings.HasPrefix(n, prefixService) || strings.HasPrefix(n, prefixLocal) || strings.HasPrefix(n, prefixExternal)
}

func endpointChain(n string) bool { return strings.HasPrefix(n, prefixEndpoint) }

func (st *famState) addChain(n string) {
	st.t.Chains[n] = true
	if _, ok := st.rules[n]; !ok && (dnatChain(n) || endpointChain(n)) {
		st.rules[n] = nil
	}
}

func (st *famState) delChain(n string) {
	delete(st.t.Chains, n)
	delete(st.rules, n)
	delete(st.t.DNAT, n)
	delete(st.t.Rules, n)
}

// addSet records a set. The kernel frees an anonymous map with its rule and
// says nothing on the feed: when a new map takes the name, the entries of
// the one before are forgotten (the rest go at the next full read).
func (st *famState) addSet(s setInfo, maps map[mapKey][]mapEntry) {
	if s.flags&unix.NFT_SET_ANONYMOUS != 0 || strings.HasPrefix(s.name, anonymousMapName) {
		if old, ok := st.anon[s.name]; ok && old.handle != s.handle {
			delete(maps, mapKey{st.fam, st.handle, old.handle})
		}
		st.anon[s.name] = s
		return
	}
	st.t.Maps[s.name] = true
}

// delSet forgets a set (and, for an anonymous one, its cached entries).
func (st *famState) delSet(name string, maps map[mapKey][]mapEntry) {
	if s, ok := st.anon[name]; ok {
		delete(maps, mapKey{st.fam, st.handle, s.handle})
		delete(st.anon, name)
		return
	}
	delete(st.t.Maps, name)
	switch name {
	case MapServiceIPs:
		clear(st.t.ServiceIPs)
	case MapNoEndpoint:
		clear(st.t.NoEndpoint)
	case MapNodePorts:
		clear(st.t.NodePorts)
	}
}

// setElement adds (or deletes) one element of a verdict map.
func (st *famState) setElement(m string, e element, add bool) {
	v6 := st.fam == unix.NFPROTO_IPV6
	switch m {
	case MapServiceIPs, MapNoEndpoint:
		k, ok := decodeServiceKey(e.key, v6)
		if !ok {
			return
		}
		dst := st.t.ServiceIPs
		v := chainOf(e.verdict)
		if m == MapNoEndpoint {
			dst, v = st.t.NoEndpoint, e.verdict
		}
		if add {
			dst[k] = v
		} else {
			delete(dst, k)
		}
	case MapNodePorts:
		k, ok := decodePortKey(e.key)
		if !ok {
			return
		}
		if add {
			st.t.NodePorts[k] = chainOf(e.verdict)
		} else {
			delete(st.t.NodePorts, k)
		}
	}
}

// endpointOf is the address an endpoint- chain DNATs to (older releases).
func (st *famState) endpointOf(chain string) (netip.AddrPort, bool) {
	for _, ru := range st.rules[chain] {
		if ru.hasDNAT {
			return ru.dnat, true
		}
	}
	return netip.AddrPort{}, false
}

// derive computes the endpoints a service-, local- or external- chain
// DNATs to from its rules, dumping the anonymous maps not known (maps
// collects the maps it uses).
func (r *Reader) derive(c *conn, st *famState, chain string, maps map[mapKey][]mapEntry) error {
	if !dnatChain(chain) {
		return nil
	}
	v6 := st.fam == unix.NFPROTO_IPV6
	eps := []netip.AddrPort{}
	for _, ru := range st.rules[chain] {
		for _, set := range ru.lookups {
			s, ok := st.anon[set]
			if !ok {
				continue
			}
			k := mapKey{st.fam, st.handle, s.handle}
			entries, cached := r.maps[k]
			if cached && s.constant() {
				r.stats.MapsCached++
			} else {
				entries = nil
				if err := c.elements(st.fam, set, func(e element) {
					if me, ok := mapEntryOf(e, v6); ok {
						entries = append(entries, me)
					}
				}); err != nil {
					return fmt.Errorf("reading %s's map: %w", chain, err)
				}
				r.stats.MapDumps++
			}
			if s.constant() {
				maps[k] = entries
			}
			for _, e := range entries {
				if e.chain == "" {
					eps = append(eps, e.value)
				} else if ap, ok := st.endpointOf(e.chain); ok {
					eps = append(eps, ap)
				}
			}
		}
		// One endpoint: nft folds the map into constants (a rule without
		// a lookup).
		if len(ru.lookups) == 0 && ru.hasDNAT {
			eps = append(eps, ru.dnat)
		}
		// A single endpoint in older releases: a plain jump or goto.
		for _, j := range ru.jumps {
			if ap, ok := st.endpointOf(j); ok {
				eps = append(eps, ap)
			}
		}
	}
	st.t.DNAT[chain] = eps
	st.t.Rules[chain] = len(st.rules[chain])
	return nil
}

// elements calls fn with each element of set (its bytes are overwritten
// after fn returns).
func (c *conn) elements(fam byte, set string, fn func(element)) error {
	err := c.request(unix.NFT_MSG_GETSETELEM, fam, true, func(b []byte) error {
		return decodeElements(b, fn)
	}, str(unix.NFTA_SET_ELEM_LIST_TABLE, TableName), str(unix.NFTA_SET_ELEM_LIST_SET, set))
	if err != nil {
		return fmt.Errorf("reading %s: %w", set, err)
	}
	return nil
}

// feedBuffer is the change feed socket's receive buffer: the events of
// kube-proxy's partial syncs between two reads; a full sync of thousands of
// Services overflows it, and the next read reads everything.
const feedBuffer = 8 << 20

// join opens a socket on nf_tables' change feed in r's network namespace.
func (r *Reader) join() (*conn, error) {
	c, err := r.dialRaw()
	if err != nil {
		return nil, err
	}
	if err := c.nl.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		c.Close()
		return nil, fmt.Errorf("joining nf_tables' change feed: %w", err)
	}
	// SO_RCVBUFFORCE passes net.core.rmem_max with CAP_NET_ADMIN, which
	// joining needed too; SetReadBuffer is the fallback.
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, feedBuffer)
	}); err != nil || serr != nil {
		_ = c.nl.SetReadBuffer(feedBuffer)
	}
	// The socket outlives a Read; a Reader dropped closes it.
	runtime.AddCleanup(r, func(c *conn) { c.Close() }, c)
	return c, nil
}

// event is one change the feed carried.
type event struct {
	msg  uint16
	fam  byte
	data []byte
}

// drain returns the events waiting on the feed (kube-proxy's tables' only,
// copied); overflow when the kernel dropped some.
func (c *conn) drain() (evs []event, overflow bool, err error) {
	for {
		var n int
		var rerr error
		if err := c.raw.Read(func(fd uintptr) bool {
			n, _, _, _, rerr = unix.Recvmsg(int(fd), c.buf, nil, unix.MSG_DONTWAIT)
			return true
		}); err != nil {
			return nil, false, err
		}
		switch {
		case rerr == unix.EAGAIN:
			return evs, overflow, nil
		case rerr == unix.ENOBUFS:
			overflow = true
			continue
		case rerr != nil:
			return nil, false, rerr
		}
		msgs, err := syscall.ParseNetlinkMessage(c.buf[:n])
		if err != nil {
			return nil, false, fmt.Errorf("parsing the change feed: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
				continue
			}
			fam := m.Data[0]
			if fam != unix.NFPROTO_IPV4 && fam != unix.NFPROTO_IPV6 {
				continue
			}
			evs = append(evs, event{msg: m.Header.Type & 0xff, fam: fam, data: slices.Clone(m.Data[4:])})
		}
	}
}

// follow applies the feed's events to the families' tables: changed when
// one was kube-proxy's; full when only reading everything again can say
// (kube-proxy's table made or deleted).
func (r *Reader) follow(c *conn, evs []event) (changed, full bool, err error) {
	dirty := map[*famState]map[string]bool{}
	for _, ev := range evs {
		var st *famState
		for _, s := range r.fams {
			if s.fam == ev.fam {
				st = s
			}
		}
		if st == nil {
			continue
		}
		ours, isFull, err := st.apply(ev, dirty, r.maps)
		if err != nil || isFull {
			return false, true, err
		}
		changed = changed || ours
	}
	for st, chains := range dirty {
		endpointsChanged := false
		for ch := range chains {
			if _, ok := st.rules[ch]; !ok {
				continue
			}
			r.stats.ChainDumps++
			var rules []rule
			err := c.request(unix.NFT_MSG_GETRULE, st.fam, true, func(b []byte) error {
				ru, err := decodeRule(b, st.fam == unix.NFPROTO_IPV6)
				if err != nil {
					return fmt.Errorf("decoding a rule: %w", err)
				}
				rules = append(rules, ru)
				return nil
			}, str(unix.NFTA_RULE_TABLE, TableName), str(unix.NFTA_RULE_CHAIN, ch))
			if errors.Is(err, unix.ENOENT) {
				// Deleted since: its event is on the feed.
				st.delChain(ch)
				continue
			}
			if err != nil {
				return false, true, fmt.Errorf("listing the rules of %s: %w", ch, err)
			}
			st.rules[ch] = rules
			endpointsChanged = endpointsChanged || endpointChain(ch)
		}
		for ch := range st.rules {
			if !chains[ch] && !endpointsChanged {
				continue
			}
			if err := r.derive(c, st, ch, r.maps); err != nil {
				return false, true, err
			}
		}
	}
	return changed, false, nil
}

// apply lays one event on the family's table, marking the chains whose
// rules changed; ours when the event was about kube-proxy's table.
func (st *famState) apply(ev event, dirty map[*famState]map[string]bool, maps map[mapKey][]mapEntry) (ours, full bool, err error) {
	mark := func(ch string) {
		if dirty[st] == nil {
			dirty[st] = map[string]bool{}
		}
		dirty[st][ch] = true
	}
	switch ev.msg {
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE:
		name, err := decodeTableName(ev.data)
		if err != nil || name != TableName {
			return false, false, err
		}
		// An update of the table itself (its flags) leaves its handle.
		if ev.msg == unix.NFT_MSG_NEWTABLE && st.t.Present {
			if h, err := decodeTableHandle(ev.data); err == nil && h == st.handle {
				return true, false, nil
			}
		}
		return true, true, nil
	case unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN:
		tbl, ch, err := decodeChain(ev.data)
		if err != nil || tbl != TableName {
			return false, false, err
		}
		if ev.msg == unix.NFT_MSG_DELCHAIN {
			st.delChain(ch)
			return true, false, nil
		}
		st.addChain(ch)
		if _, ok := st.rules[ch]; ok {
			mark(ch)
		}
		return true, false, nil
	case unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE:
		tbl, ch, err := decodeRuleChain(ev.data)
		if err != nil || tbl != TableName {
			return false, false, err
		}
		if _, ok := st.rules[ch]; ok {
			mark(ch)
		}
		return true, false, nil
	case unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET:
		s, tbl, err := decodeSet(ev.data)
		if err != nil || tbl != TableName {
			return false, false, err
		}
		if ev.msg == unix.NFT_MSG_DELSET {
			st.delSet(s.name, maps)
		} else {
			st.addSet(s, maps)
		}
		return true, false, nil
	case unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM:
		tbl, set, err := decodeElemList(ev.data)
		if err != nil || tbl != TableName {
			return false, false, err
		}
		if _, anon := st.anon[set]; !anon {
			err = decodeElements(ev.data, func(e element) { st.setElement(set, e, ev.msg == unix.NFT_MSG_NEWSETELEM) })
		}
		return true, false, err
	}
	return false, false, nil
}

// ReadIPTables returns the chains of iptables-nft's tables nat, mangle and
// filter, families ip then ip6.
func (r *Reader) ReadIPTables() ([]IPTablesFamily, error) {
	c, err := r.dialRaw()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []IPTablesFamily
	for _, fam := range families {
		f := IPTablesFamily{Family: fam.name, Chains: map[string]map[string]bool{}}
		err := c.request(unix.NFT_MSG_GETCHAIN, fam.f, true, func(b []byte) error {
			tbl, ch, err := decodeChain(b)
			if err != nil {
				return fmt.Errorf("decoding a chain: %w", err)
			}
			switch tbl {
			case "nat", "mangle", "filter":
			default:
				return nil
			}
			if f.Chains[tbl] == nil {
				f.Chains[tbl] = map[string]bool{}
			}
			f.Chains[tbl][ch] = true
			return nil
		})
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("listing the chains of family %s: %w", fam.name, err)
		}
		out = append(out, f)
	}
	return out, nil
}
